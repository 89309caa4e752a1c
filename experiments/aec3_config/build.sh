#!/usr/bin/env bash
# Builds _build/libaec3_shim.so: aec3_shim.cc linked over a static webrtc-audio-processing 2.1 (WebRTC M131, with
# AEC3) and its bundled abseil, both from the sdist of aec-audio-processing 1.0.1 on PyPI.
# Needs g++, meson (>= 0.63), ninja, curl (Debian: apt-get install -y g++ meson ninja-build curl).
# JOBS (default 1) is ninja's parallelism.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${AEC3_BUILD_DIR:-$here/_build}
sdist=aec_audio_processing-1.0.1.tar.gz
url=https://files.pythonhosted.org/packages/9e/f1/d4c91eeaed6a2d91b448eb3eb17c150a505973aa7c5495d8772325918e38/$sdist
sha256=f03a3ce3f45bf15a04a8504d0f692a651180ca2d3171bd9f3de0516e5f2b8360

mkdir -p "$build"
cd "$build"
[ -f "$sdist" ] || curl -fsSLO "$url"
echo "$sha256  $sdist" | sha256sum -c -
[ -d aec_audio_processing-1.0.1 ] || tar xzf "$sdist"
source=$build/aec_audio_processing-1.0.1/webrtc-audio-processing

# abseil comes from the sdist's subprojects/ (Debian's libabsl-dev is older than the 20240722 it needs).
[ -d meson ] || meson setup --buildtype=release --default-library=static -Db_staticpic=true \
  --wrap-mode=nodownload meson "$source"
ninja -C meson -j "${JOBS:-1}" webrtc/modules/audio_processing/libwebrtc-audio-processing-2.a

flags=(-std=c++20 -O2 -fPIC -pthread -DNDEBUG -DWEBRTC_POSIX -DWEBRTC_LINUX -DWEBRTC_APM_DEBUG_DUMP=0
  -I"$source/webrtc" -I"$source/subprojects/abseil-cpp-20240722.0")
g++ "${flags[@]}" -c "$here/aec3_shim.cc" -o aec3_shim.o
# Every static library the build made, in one group so their order does not matter.
mapfile -t archives < <(find meson -name '*.a' | sort)
g++ -shared -Wl,--no-undefined -o libaec3_shim.so aec3_shim.o -Wl,--start-group "${archives[@]}" -Wl,--end-group -pthread -lrt
echo "built $build/libaec3_shim.so"
