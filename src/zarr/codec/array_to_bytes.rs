//! array_to_bytes codecs.
