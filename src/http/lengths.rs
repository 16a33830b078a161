//! `Content-Length` values of small answers, built once.
//!
//! Every answer carries its length, and most store answers are small
//! (missing keys, metadata documents, small chunks). A [`HeaderValue`] made
//! from a number is formatted and copied into a fresh allocation on every
//! request; the lengths below [`PREBUILT`] are formatted once, at first use,
//! into one static string, and each answer takes a clone of its value (a
//! static `Bytes`: no allocation, no reference count).

use std::fmt::Write as _;
use std::sync::LazyLock;

use axum::http::HeaderValue;
use bytes::Bytes;

/// Lengths below this are pre-built (about 18 KiB of text, once).
pub const PREBUILT: u64 = 4096;

static VALUES: LazyLock<Box<[HeaderValue]>> = LazyLock::new(|| {
    let mut text = String::new();
    let mut ends = Vec::with_capacity(PREBUILT as usize);
    for n in 0..PREBUILT {
        let _ = write!(text, "{n}");
        ends.push(text.len());
    }
    // Leaked once for the life of the process: the values borrow it.
    let text: &'static str = Box::leak(text.into_boxed_str());
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let digits = Bytes::from_static(&text.as_bytes()[start..end]);
            start = end;
            HeaderValue::from_maybe_shared(digits).expect("digits are a valid header value")
        })
        .collect()
});

/// The `Content-Length` value of a body of `n` bytes.
#[must_use]
pub fn content_length(n: u64) -> HeaderValue {
    usize::try_from(n).ok().and_then(|i| VALUES.get(i)).cloned().unwrap_or_else(|| HeaderValue::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_reads_as_itself() {
        for n in (0..PREBUILT + 3).chain([u64::MAX, 1 << 40]) {
            let v = content_length(n);
            assert_eq!(v.to_str().unwrap().parse::<u64>().unwrap(), n);
            assert_eq!(v, HeaderValue::from(n));
        }
    }
}
