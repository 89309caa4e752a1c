// A C ABI over WebRTC's AudioProcessing with AEC3 built from a caller's EchoCanceller3Config, for ctypes.
//
// The config is set field by field by its dotted C++ name ("filter.initial_state_seconds"); the table below
// holds the fields that shape the residual echo suppressor and the initial state. 16 kHz mono, 10 ms int16.

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "api/audio/audio_processing.h"
#include "api/audio/echo_canceller3_config.h"
#include "api/audio/echo_control.h"
#include "api/scoped_refptr.h"
#include "modules/audio_processing/aec3/echo_canceller3.h"
#include "system_wrappers/include/field_trial.h"

namespace {

struct Field {
  enum Kind { kFloat, kSize, kInt, kBool } kind;
  void* at;
};

#define FIELDS(X)                                           \
  X(filter.initial_state_seconds)                           \
  X(filter.conservative_initial_phase)                      \
  X(filter.config_change_duration_blocks)                   \
  X(filter.coarse_reset_hangover_blocks)                    \
  X(filter.enable_coarse_filter_output_usage)               \
  X(filter.use_linear_filter)                               \
  X(filter.refined.length_blocks)                           \
  X(filter.refined_initial.length_blocks)                   \
  X(delay.default_delay)                                    \
  X(delay.delay_headroom_samples)                           \
  X(erle.min)                                               \
  X(erle.max_l)                                             \
  X(erle.max_h)                                             \
  X(erle.onset_detection)                                   \
  X(ep_strength.default_gain)                               \
  X(ep_strength.default_len)                                \
  X(ep_strength.nearend_len)                                \
  X(ep_strength.echo_can_saturate)                          \
  X(ep_strength.bounded_erl)                                \
  X(ep_strength.erle_onset_compensation_in_dominant_nearend) \
  X(ep_strength.use_conservative_tail_frequency_response)   \
  X(echo_audibility.low_render_limit)                       \
  X(echo_audibility.normal_render_limit)                    \
  X(echo_audibility.floor_power)                            \
  X(echo_audibility.audibility_threshold_lf)                \
  X(echo_audibility.audibility_threshold_mf)                \
  X(echo_audibility.audibility_threshold_hf)                \
  X(echo_audibility.use_stationarity_properties)            \
  X(echo_audibility.use_stationarity_properties_at_init)    \
  X(render_levels.active_render_limit)                      \
  X(render_levels.poor_excitation_render_limit)             \
  X(echo_removal_control.linear_and_stable_echo_path)       \
  X(echo_model.noise_gate_power)                            \
  X(echo_model.min_noise_floor_power)                       \
  X(echo_model.stationary_gate_slope)                       \
  X(echo_model.model_reverb_in_nonlinear_mode)              \
  X(suppressor.nearend_average_blocks)                      \
  X(suppressor.normal_tuning.mask_lf.enr_transparent)       \
  X(suppressor.normal_tuning.mask_lf.enr_suppress)          \
  X(suppressor.normal_tuning.mask_lf.emr_transparent)       \
  X(suppressor.normal_tuning.mask_hf.enr_transparent)       \
  X(suppressor.normal_tuning.mask_hf.enr_suppress)          \
  X(suppressor.normal_tuning.mask_hf.emr_transparent)       \
  X(suppressor.normal_tuning.max_inc_factor)                \
  X(suppressor.normal_tuning.max_dec_factor_lf)             \
  X(suppressor.nearend_tuning.mask_lf.enr_transparent)      \
  X(suppressor.nearend_tuning.mask_lf.enr_suppress)         \
  X(suppressor.nearend_tuning.mask_hf.enr_transparent)      \
  X(suppressor.nearend_tuning.mask_hf.enr_suppress)         \
  X(suppressor.nearend_tuning.max_inc_factor)               \
  X(suppressor.nearend_tuning.max_dec_factor_lf)            \
  X(suppressor.lf_smoothing_during_initial_phase)           \
  X(suppressor.dominant_nearend_detection.enr_threshold)    \
  X(suppressor.dominant_nearend_detection.enr_exit_threshold) \
  X(suppressor.dominant_nearend_detection.snr_threshold)    \
  X(suppressor.dominant_nearend_detection.hold_duration)    \
  X(suppressor.dominant_nearend_detection.trigger_threshold) \
  X(suppressor.dominant_nearend_detection.use_during_initial_phase) \
  X(suppressor.dominant_nearend_detection.use_unbounded_echo_spectrum) \
  X(suppressor.use_subband_nearend_detection)               \
  X(suppressor.high_bands_suppression.enr_threshold)        \
  X(suppressor.high_bands_suppression.max_gain_during_echo) \
  X(suppressor.floor_first_increase)                        \
  X(suppressor.conservative_hf_suppression)

Field Of(float* at) { return {Field::kFloat, at}; }
Field Of(size_t* at) { return {Field::kSize, at}; }
Field Of(int* at) { return {Field::kInt, at}; }
Field Of(bool* at) { return {Field::kBool, at}; }

std::optional<Field> Find(webrtc::EchoCanceller3Config& c, const char* name) {
#define MATCH(path) \
  if (std::strcmp(name, #path) == 0) return Of(&c.path);
  FIELDS(MATCH)
#undef MATCH
  return std::nullopt;
}

const char* const kNames[] = {
#define NAME(path) #path,
    FIELDS(NAME)
#undef NAME
};

class Factory : public webrtc::EchoControlFactory {
 public:
  explicit Factory(const webrtc::EchoCanceller3Config& config) : config_(config) {}
  std::unique_ptr<webrtc::EchoControl> Create(int rate, int render_channels, int capture_channels) override {
    return std::make_unique<webrtc::EchoCanceller3>(config_, std::nullopt, rate, render_channels,
                                                    capture_channels);
  }

 private:
  const webrtc::EchoCanceller3Config config_;
};

struct Apm {
  rtc::scoped_refptr<webrtc::AudioProcessing> apm;
  webrtc::StreamConfig stream;
  // GetStatistics pops the oldest of the per-frame reports queued since the last call: called once a frame, the
  // report is the frame's own.
  webrtc::AudioProcessingStats stats;
};

std::string field_trials;  // webrtc keeps the pointer it is given

}  // namespace

extern "C" {

int aec3_field_count() { return sizeof(kNames) / sizeof(kNames[0]); }
const char* aec3_field_name(int index) { return kNames[index]; }

void* aec3_config_new() { return new webrtc::EchoCanceller3Config(); }
void aec3_config_free(void* config) { delete static_cast<webrtc::EchoCanceller3Config*>(config); }

// 0 when set, -1 for an unknown name.
int aec3_config_set(void* config, const char* name, double value) {
  auto field = Find(*static_cast<webrtc::EchoCanceller3Config*>(config), name);
  if (!field) return -1;
  switch (field->kind) {
    case Field::kFloat: *static_cast<float*>(field->at) = static_cast<float>(value); break;
    case Field::kSize: *static_cast<size_t*>(field->at) = static_cast<size_t>(value); break;
    case Field::kInt: *static_cast<int*>(field->at) = static_cast<int>(value); break;
    case Field::kBool: *static_cast<bool*>(field->at) = value != 0.0; break;
  }
  return 0;
}

// 0 when read, -1 for an unknown name.
int aec3_config_get(void* config, const char* name, double* value) {
  auto field = Find(*static_cast<webrtc::EchoCanceller3Config*>(config), name);
  if (!field) return -1;
  switch (field->kind) {
    case Field::kFloat: *value = *static_cast<float*>(field->at); break;
    case Field::kSize: *value = static_cast<double>(*static_cast<size_t*>(field->at)); break;
    case Field::kInt: *value = *static_cast<int*>(field->at); break;
    case Field::kBool: *value = *static_cast<bool*>(field->at); break;
  }
  return 0;
}

// 1 when the config was already within AEC3's ranges, 0 when Validate clamped it (in place).
int aec3_config_validate(void* config) {
  return webrtc::EchoCanceller3Config::Validate(static_cast<webrtc::EchoCanceller3Config*>(config)) ? 1 : 0;
}

// Process-wide, before the first AudioProcessing: e.g. "WebRTC-Aec3TransparentModeHmm/Enabled/".
void aec3_set_field_trials(const char* trials) {
  field_trials = trials;
  webrtc::field_trial::InitFieldTrialsFromString(field_trials.c_str());
}

// An AudioProcessing whose only submodule is AEC3 with ``config`` (copied), as livekit's with echo cancellation on.
void* aec3_apm_new(void* config, int sample_rate_hz) {
  webrtc::AudioProcessing::Config apm_config;
  apm_config.echo_canceller.enabled = true;
  auto apm = webrtc::AudioProcessingBuilder()
                 .SetConfig(apm_config)
                 .SetEchoControlFactory(
                     std::make_unique<Factory>(*static_cast<webrtc::EchoCanceller3Config*>(config)))
                 .Create();
  if (!apm) return nullptr;
  return new Apm{apm, webrtc::StreamConfig(sample_rate_hz, 1), {}};
}

void aec3_apm_free(void* apm) { delete static_cast<Apm*>(apm); }

int aec3_set_stream_delay_ms(void* apm, int delay_ms) {
  return static_cast<Apm*>(apm)->apm->set_stream_delay_ms(delay_ms);
}

// One 10 ms frame the far end plays; 0 or an AudioProcessing error code.
int aec3_process_reverse(void* apm, const int16_t* played) {
  auto* a = static_cast<Apm*>(apm);
  int16_t out[480];
  return a->apm->ProcessReverseStream(played, a->stream, a->stream, out);
}

// One 10 ms frame from the microphone, cleaned in place; 0 or an AudioProcessing error code.
int aec3_process_capture(void* apm, int16_t* heard) {
  auto* a = static_cast<Apm*>(apm);
  const int error = a->apm->ProcessStream(heard, a->stream, a->stream, heard);
  a->stats = a->apm->GetStatistics();
  return error;
}

// ERL, ERLE (dB) and delay (ms) from GetStatistics after the last capture frame; NaN / -1 where AEC3 reports
// none (divergent_filter_fraction: WebRTC M131 no longer fills it).
void aec3_statistics(void* apm, double* erl, double* erle, int* delay_ms, double* divergent) {
  const webrtc::AudioProcessingStats& stats = static_cast<Apm*>(apm)->stats;
  *erl = stats.echo_return_loss.value_or(__builtin_nan(""));
  *erle = stats.echo_return_loss_enhancement.value_or(__builtin_nan(""));
  *delay_ms = stats.delay_ms.value_or(-1);
  *divergent = stats.divergent_filter_fraction.value_or(__builtin_nan(""));
}

}  // extern "C"
