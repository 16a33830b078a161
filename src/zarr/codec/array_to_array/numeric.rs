//! Element values and numpy's casting rules, for the numcodecs filters that
//! do arithmetic (`delta`, `fixedscaleoffset`).
//!
//! numpy semantics reproduced: integer arithmetic wraps; float arithmetic
//! happens in the operands' precision (computing in f64 and rounding once is
//! exact for +, -, *, / of f32 and f16 operands); int -> int casts wrap;
//! float -> int casts truncate toward zero; int/float -> float round to
//! nearest.

use half::f16;

use crate::zarr::data_type::DataType;

/// A numeric element type the filters accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumType {
    /// Integer of `bytes` bytes.
    Int { bytes: usize, signed: bool },
    /// `float16`.
    F16,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

/// A value: an exact integer or a float already rounded to its type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

impl NumType {
    /// The type of an engine data type, if numeric.
    pub(crate) fn of(dt: &DataType) -> Option<Self> {
        Some(match dt {
            DataType::Int8 => Self::Int { bytes: 1, signed: true },
            DataType::Int16 => Self::Int { bytes: 2, signed: true },
            DataType::Int32 => Self::Int { bytes: 4, signed: true },
            DataType::Int64 => Self::Int { bytes: 8, signed: true },
            DataType::UInt8 => Self::Int { bytes: 1, signed: false },
            DataType::UInt16 => Self::Int { bytes: 2, signed: false },
            DataType::UInt32 => Self::Int { bytes: 4, signed: false },
            DataType::UInt64 => Self::Int { bytes: 8, signed: false },
            DataType::Float16 => Self::F16,
            DataType::Float32 => Self::F32,
            DataType::Float64 => Self::F64,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Self::Int { bytes, .. } => bytes,
            Self::F16 => 2,
            Self::F32 => 4,
            Self::F64 => 8,
        }
    }

    pub(crate) fn is_float(self) -> bool {
        !matches!(self, Self::Int { .. })
    }

    /// Reads one little-endian element (`bytes.len() == self.size()`).
    pub(crate) fn read(self, b: &[u8]) -> Num {
        let mut a = [0u8; 8];
        a[..b.len()].copy_from_slice(b);
        let raw = u64::from_le_bytes(a);
        match self {
            Self::Int { bytes, signed } => {
                let bits = 8 * bytes as u32;
                if signed {
                    let shift = 64 - bits;
                    Num::Int(i128::from(((raw << shift) as i64) >> shift))
                } else {
                    Num::Int(i128::from(raw))
                }
            }
            Self::F16 => Num::Float(f16::from_bits(raw as u16).to_f64()),
            Self::F32 => Num::Float(f64::from(f32::from_bits(raw as u32))),
            Self::F64 => Num::Float(f64::from_bits(raw)),
        }
    }

    /// Casts `v` to this type (numpy `astype`) and writes it little-endian.
    pub(crate) fn write(self, v: Num, out: &mut Vec<u8>) {
        match self {
            Self::Int { bytes, .. } => {
                let i = match v {
                    Num::Int(i) => i,
                    // Saturating in Rust; undefined in C (numpy) for out-of-range values.
                    Num::Float(f) => f.trunc() as i128,
                };
                out.extend_from_slice(&(i as u128 as u64).to_le_bytes()[..bytes]);
            }
            Self::F16 => out.extend_from_slice(&f16::from_f64(self.round(v)).to_bits().to_le_bytes()),
            Self::F32 => out.extend_from_slice(&(self.round(v) as f32).to_le_bytes()),
            Self::F64 => out.extend_from_slice(&self.round(v).to_le_bytes()),
        }
    }

    /// `v` converted to this type, as a value (wrapping for integers).
    pub(crate) fn cast(self, v: Num) -> Num {
        match self {
            Self::Int { bytes, signed } => {
                let i = match v {
                    Num::Int(i) => i,
                    Num::Float(f) => f.trunc() as i128,
                };
                let bits = 8 * bytes as u32;
                let masked = (i as u128) & (u128::MAX >> (128 - bits));
                if signed && masked >> (bits - 1) == 1 {
                    Num::Int(masked as i128 - (1i128 << bits))
                } else {
                    Num::Int(masked as i128)
                }
            }
            _ => Num::Float(self.round(v)),
        }
    }

    /// A value rounded to this float type's precision.
    fn round(self, v: Num) -> f64 {
        let f = match v {
            Num::Int(i) => match self {
                Self::F32 => return f64::from(i as f32),
                _ => i as f64,
            },
            Num::Float(f) => f,
        };
        match self {
            Self::F16 => f16::from_f64(f).to_f64(),
            Self::F32 => f64::from(f as f32),
            _ => f,
        }
    }

    /// `a op b` computed in this type.
    pub(crate) fn arith(self, a: Num, b: Num, op: Op) -> Num {
        match self {
            Self::Int { .. } => {
                let (Num::Int(x), Num::Int(y)) = (a, b) else { return self.arith_float(a, b, op) };
                let r = match op {
                    Op::Add => x.wrapping_add(y),
                    Op::Sub => x.wrapping_sub(y),
                    Op::Mul => x.wrapping_mul(y),
                    Op::Div => return Num::Float(x as f64 / y as f64),
                };
                self.cast(Num::Int(r))
            }
            _ => self.arith_float(a, b, op),
        }
    }

    fn arith_float(self, a: Num, b: Num, op: Op) -> Num {
        let f = |v: Num| match v {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        };
        let (x, y) = (f(a), f(b));
        let r = match op {
            Op::Add => x + y,
            Op::Sub => x - y,
            Op::Mul => x * y,
            Op::Div => x / y,
        };
        if self.is_float() {
            Num::Float(self.round(Num::Float(r)))
        } else {
            Num::Float(r)
        }
    }
}

/// An arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// numpy's `result_type` for two numeric types.
pub(crate) fn promote(a: NumType, b: NumType) -> NumType {
    use NumType::{Int, F16, F32, F64};
    let float_rank = |t: NumType| match t {
        F16 => 1,
        F32 => 2,
        _ => 3,
    };
    match (a, b) {
        (Int { bytes: x, signed: sx }, Int { bytes: y, signed: sy }) => {
            if sx == sy {
                Int { bytes: x.max(y), signed: sx }
            } else {
                let (s, u) = if sx { (x, y) } else { (y, x) };
                if u < s {
                    Int { bytes: s, signed: true }
                } else if u < 8 {
                    Int { bytes: 2 * u, signed: true }
                } else {
                    F64
                }
            }
        }
        (Int { bytes, .. }, f) | (f, Int { bytes, .. }) => {
            // The smallest float that holds every value of the integer type.
            let needed = match bytes {
                1 => 1,
                2 => 2,
                _ => 3,
            };
            match float_rank(f).max(needed) {
                1 => F16,
                2 => F32,
                _ => F64,
            }
        }
        (x, y) => {
            if float_rank(x) >= float_rank(y) {
                x
            } else {
                y
            }
        }
    }
}

/// A `dtype` / `astype` member of a numcodecs filter configuration: the
/// engine type and whether the filter's output is big-endian.
pub(crate) fn parse_dtype(
    codec: &str,
    config: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Option<(DataType, NumType, bool)>, crate::zarr::codec::CodecError> {
    use crate::zarr::metadata::v2::dtype::{ByteOrder, DataTypeV2};
    let err = |why: String| crate::zarr::codec::CodecError::new(codec, why);
    let Some(value) = config.get(field).filter(|v| !v.is_null()) else { return Ok(None) };
    let parsed = DataTypeV2::from_json(value, field).map_err(|e| err(e.to_string()))?;
    let DataTypeV2::Scalar { byte_order, data_type } = parsed else {
        return Err(err(format!("{field} {value} is not a numeric dtype")));
    };
    let dt = data_type;
    let num = NumType::of(&dt).ok_or_else(|| err(format!("{field} {value} is not an integer or float dtype")))?;
    Ok(Some((dt, num, byte_order == ByteOrder::Big)))
}

/// A JSON number as a value that remembers whether it was an integer (numpy
/// treats Python ints and floats differently in mixed arithmetic).
pub(crate) fn parse_number(
    codec: &str,
    config: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Num, crate::zarr::codec::CodecError> {
    let v =
        config.get(field).ok_or_else(|| crate::zarr::codec::CodecError::new(codec, format!("{field} is required")))?;
    if let Some(i) = v.as_i64() {
        Ok(Num::Int(i128::from(i)))
    } else if let Some(u) = v.as_u64() {
        Ok(Num::Int(i128::from(u)))
    } else if let Some(f) = v.as_f64() {
        Ok(Num::Float(f))
    } else {
        Err(crate::zarr::codec::CodecError::new(codec, format!("{field} must be a number, got {v}")))
    }
}
