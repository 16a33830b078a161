//! Chunk key encodings: chunk grid coordinates <-> store keys (relative to
//! the array's prefix).
//!
//! Spec: Zarr v3 core §"Chunk key encoding", `chunk-key-encodings/default`
//! (`c` then the coordinates, each preceded by the separator: `c/1/2`,
//! `c.1.2`; a zero-rank array's only chunk is `c`) and
//! `chunk-key-encodings/v2` (`1.2` or `1/2`; a zero-rank array's only chunk
//! is `0`). Zarr v2's `dimension_separator` is the `v2` encoding.

use super::metadata::v2::Separator;
use super::metadata::v3::ChunkKeyEncoding as ChunkKeyEncodingMetadata;

/// A key that is not a chunk key of this encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{key}\" is not a chunk key of this array: {reason}")]
pub struct ChunkKeyError {
    /// The key.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// How chunk coordinates become keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKeyEncoding {
    /// v3 `default`: `c` prefix, then `separator` + each coordinate.
    Default {
        /// `'/'` or `'.'`.
        separator: char,
    },
    /// v3 `v2` and Zarr v2: coordinates joined by `separator`; `0` for rank 0.
    V2 {
        /// `'.'` or `'/'`.
        separator: char,
    },
}

fn separator_char(s: Separator) -> char {
    match s {
        Separator::Dot => '.',
        Separator::Slash => '/',
    }
}

impl From<ChunkKeyEncodingMetadata> for ChunkKeyEncoding {
    fn from(m: ChunkKeyEncodingMetadata) -> Self {
        match m {
            ChunkKeyEncodingMetadata::Default { separator } => Self::Default { separator: separator_char(separator) },
            ChunkKeyEncodingMetadata::V2 { separator } => Self::V2 { separator: separator_char(separator) },
        }
    }
}

impl ChunkKeyEncoding {
    /// The key of the chunk at grid coordinates `coords`.
    #[must_use]
    pub fn encode(&self, coords: &[u64]) -> String {
        use std::fmt::Write as _;
        let mut key = String::with_capacity(2 + coords.len() * 4);
        match *self {
            Self::Default { separator } => {
                key.push('c');
                for c in coords {
                    key.push(separator);
                    let _ = write!(key, "{c}");
                }
            }
            Self::V2 { separator } => {
                if coords.is_empty() {
                    key.push('0');
                }
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        key.push(separator);
                    }
                    let _ = write!(key, "{c}");
                }
            }
        }
        key
    }

    /// The grid coordinates of `key` for an array of rank `rank`.
    ///
    /// # Errors
    /// When `key` is not exactly what [`ChunkKeyEncoding::encode`] produces
    /// for some coordinates: wrong prefix or separator, wrong number of
    /// coordinates, non-decimal or zero-padded numbers, overflow.
    pub fn decode(&self, key: &str, rank: usize) -> Result<Vec<u64>, ChunkKeyError> {
        let err = |reason: &str| ChunkKeyError { key: key.to_owned(), reason: reason.to_owned() };
        let (body, separator) = match *self {
            Self::Default { separator } => {
                let rest = key.strip_prefix('c').ok_or_else(|| err("expected the prefix \"c\""))?;
                if rank == 0 {
                    return if rest.is_empty() {
                        Ok(Vec::new())
                    } else {
                        Err(err("a zero-rank array's only chunk is \"c\""))
                    };
                }
                (rest.strip_prefix(separator).ok_or_else(|| err(&format!("expected \"c{separator}\"")))?, separator)
            }
            Self::V2 { separator } => {
                if rank == 0 {
                    return if key == "0" {
                        Ok(Vec::new())
                    } else {
                        Err(err("a zero-rank array's only chunk is \"0\""))
                    };
                }
                (key, separator)
            }
        };
        let parts: Vec<&str> = body.split(separator).collect();
        if parts.len() != rank {
            return Err(err(&format!("expected {rank} coordinates separated by '{separator}', got {}", parts.len())));
        }
        parts
            .iter()
            .map(|p| {
                let canonical =
                    !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (*p == "0" || !p.starts_with('0'));
                if !canonical {
                    return Err(err(&format!("coordinate \"{p}\" is not a decimal number without leading zeros")));
                }
                p.parse::<u64>().map_err(|_| err(&format!("coordinate \"{p}\" is too large")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_encoding() {
        let e = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(e.encode(&[1, 23, 0]), "c/1/23/0");
        assert_eq!(e.encode(&[]), "c");
        assert_eq!(e.decode("c/1/23/0", 3).unwrap(), vec![1, 23, 0]);
        assert_eq!(e.decode("c", 0).unwrap(), Vec::<u64>::new());
        let dot = ChunkKeyEncoding::Default { separator: '.' };
        assert_eq!(dot.encode(&[4, 5]), "c.4.5");
        assert_eq!(dot.decode("c.4.5", 2).unwrap(), vec![4, 5]);
        for bad in ["c/1", "c/1/2/3", "c.1.2", "1/2", "c/01/2", "c//2", "c/1/-2", "c/1/2/", "c/1/99999999999999999999"]
        {
            assert!(e.decode(bad, 2).is_err(), "{bad}");
        }
        assert!(e.decode("c/0", 0).is_err());
    }

    #[test]
    fn v2_encoding() {
        let e = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(e.encode(&[1, 2]), "1.2");
        assert_eq!(e.encode(&[]), "0");
        assert_eq!(e.decode("0", 0).unwrap(), Vec::<u64>::new());
        assert_eq!(e.decode("10.0", 2).unwrap(), vec![10, 0]);
        let slash = ChunkKeyEncoding::V2 { separator: '/' };
        assert_eq!(slash.encode(&[3, 0, 7]), "3/0/7");
        assert_eq!(slash.decode("3/0/7", 3).unwrap(), vec![3, 0, 7]);
        for bad in ["1/2", "1.2.3", "c.1.2", "1.", "", "1.+2"] {
            assert!(e.decode(bad, 2).is_err(), "{bad}");
        }
        assert!(e.decode("c", 0).is_err());
    }

    #[test]
    fn from_metadata() {
        let m = ChunkKeyEncodingMetadata::V2 { separator: Separator::Slash };
        assert_eq!(ChunkKeyEncoding::from(m), ChunkKeyEncoding::V2 { separator: '/' });
    }

    proptest::proptest! {
        #[test]
        fn round_trip(coords in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..5), dot in proptest::prelude::any::<bool>()) {
            let sep = if dot { '.' } else { '/' };
            for e in [ChunkKeyEncoding::Default { separator: sep }, ChunkKeyEncoding::V2 { separator: sep }] {
                proptest::prop_assert_eq!(e.decode(&e.encode(&coords), coords.len()).unwrap(), coords.clone());
            }
        }
    }
}
