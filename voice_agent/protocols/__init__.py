"""Sans-I/O wire protocol codecs: bytes and text in, events out, and back."""
