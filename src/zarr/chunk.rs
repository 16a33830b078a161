//! Decoded chunks: the value every codec chain decodes to and encodes from.

use super::data_type::DataType;

/// The type of a decoded representation: shape, data type and fill value
/// (spec: v3 core §"Determination of encoded representations").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRepr {
    /// Shape of the chunk, C order, outermost first.
    pub shape: Vec<u64>,
    pub data_type: DataType,
    /// The fill value as one element in the in-memory layout (little-endian;
    /// UTF-8 / raw bytes for variable-length types).
    pub fill_value: Vec<u8>,
}

impl ChunkRepr {
    /// Number of elements (saturating; shapes are validated far below `u64::MAX`).
    #[must_use]
    pub fn num_elements(&self) -> u64 {
        self.shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
    }

    /// Decoded size in bytes for fixed-size types, `None` for variable-length
    /// types or sizes that do not fit in `usize`.
    #[must_use]
    pub fn num_bytes(&self) -> Option<usize> {
        let n = usize::try_from(self.num_elements()).ok()?;
        n.checked_mul(self.data_type.size()?)
    }
}

/// Decoded chunk elements, in C order of `ChunkRepr::shape`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkData {
    /// Fixed-size elements, little-endian, packed: `num_elements * size` bytes.
    Fixed(Vec<u8>),
    /// Variable-length elements: one byte string per element.
    Variable(Vec<Vec<u8>>),
}

impl ChunkData {
    /// A chunk of `repr` where every element is the fill value.
    #[must_use]
    pub fn filled(repr: &ChunkRepr) -> Self {
        let n = usize::try_from(repr.num_elements()).unwrap_or(0);
        if repr.data_type.is_variable() {
            Self::Variable(vec![repr.fill_value.clone(); n])
        } else if repr.fill_value.iter().all(|&b| b == 0) {
            Self::Fixed(vec![0; n * repr.fill_value.len()])
        } else {
            Self::Fixed(repr.fill_value.repeat(n))
        }
    }

    /// The packed bytes of fixed-size elements, which must be exactly `len`
    /// bytes (`None`: a length that overflowed while being computed).
    ///
    /// # Errors
    /// Variable-length data, or a length other than `len`; named for `codec`.
    pub fn into_fixed(self, codec: &str, len: Option<usize>) -> Result<Vec<u8>, super::codec::CodecError> {
        use super::codec::CodecError;
        match self {
            Self::Fixed(b) if Some(b.len()) == len => Ok(b),
            Self::Fixed(b) => {
                Err(CodecError::new(codec, format!("expected {} bytes, got {}", len.unwrap_or(0), b.len())))
            }
            Self::Variable(_) => Err(CodecError::new(codec, "expected fixed-size elements")),
        }
    }

    /// True when every element equals the fill value.
    #[must_use]
    pub fn is_fill(&self, repr: &ChunkRepr) -> bool {
        match self {
            Self::Fixed(bytes) => {
                let f = &repr.fill_value;
                !f.is_empty() && bytes.chunks_exact(f.len()).all(|e| e == f.as_slice())
            }
            Self::Variable(items) => items.iter().all(|e| *e == repr.fill_value),
        }
    }
}
