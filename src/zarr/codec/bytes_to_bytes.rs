//! bytes_to_bytes codecs.
