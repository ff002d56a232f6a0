//! Literal codecs (placeholder, being written).
