//! array_to_array codecs.
