//! The numcodecs filters that cast or round elements one by one: `astype`,
//! `quantize` and `bitround` (v2 filters; v3 `numcodecs.astype`,
//! `numcodecs.quantize`, `numcodecs.bitround`).
//!
//! numcodecs 0.16 (read in the test venv, and the cases below generated
//! with it):
//! - `astype`: encode `x.astype(encode_dtype)`, decode
//!   `y.astype(decode_dtype)`: numpy casts (integers wrap, floats to
//!   integers truncate toward zero, to floats round to nearest).
//! - `quantize`: encode `np.around(scale * x) / scale` in `dtype`'s
//!   precision (a float array times a Python float stays in the array's
//!   precision), then `.astype(astype)`, where `scale = 2 ** bits` and
//!   `bits = ceil(log2(10 ** -e))`, `e` being `log10(10 ** -digits)`
//!   rounded away from zero; decode `y.astype(dtype)`. Floats only.
//! - `bitround`: encode keeps `keepbits` bits of each float's mantissa,
//!   rounding half to even in the integer view of the bits; decode is the
//!   bits as they are. Floats of 16, 32 and 64 bits.

use serde_json::{Map, Value};

use super::numeric::{parse_dtype, Num, NumType, Op};
use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::{ArrayToArrayCodec, CodecError, CodecResult};
use crate::zarr::data_type::DataType;

/// What the filter does to each element.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// `astype`: a cast each way.
    AsType,
    /// `quantize`: rounds to a multiple of `1 / scale`, then a cast.
    Quantize { scale: f64 },
    /// `bitround`: keeps this many mantissa bits; the type stays.
    BitRound { keepbits: u32 },
}

/// A prepared `astype`, `quantize` or `bitround` filter.
#[derive(Debug, Clone, PartialEq)]
pub struct CastCodec {
    name: &'static str,
    kind: Kind,
    /// The decoded (array's) type; `None` for `bitround`, which takes
    /// the chunk's.
    dtype: Option<(DataType, NumType)>,
    /// The encoded type, when it is another.
    astype: Option<(DataType, NumType)>,
    astype_big_endian: Option<bool>,
}

/// The power of two `quantize` scales by for `digits` decimal digits, as
/// numcodecs computes it (in f64).
fn quantize_scale(digits: i64) -> CodecResult<f64> {
    let err = || CodecError::new("quantize", format!("digits {digits} is outside -300..=300"));
    if !(-300..=300).contains(&digits) {
        return Err(err());
    }
    let digits = i32::try_from(digits).map_err(|_| err())?;
    let precision = 10f64.powi(-digits);
    let exp = precision.log10();
    let exp = if exp < 0.0 { exp.floor() } else { exp.ceil() };
    let bits = 10f64.powf(-exp).log2().ceil();
    Ok(2f64.powf(bits))
}

/// A float type's mantissa bits.
fn mantissa_bits(num: NumType) -> Option<u32> {
    match num {
        NumType::F16 => Some(10),
        NumType::F32 => Some(23),
        NumType::F64 => Some(52),
        NumType::Int { .. } => None,
    }
}

impl CastCodec {
    /// numcodecs `astype` (`encode_dtype`, `decode_dtype`).
    ///
    /// # Errors
    /// A missing or non-numeric dtype.
    pub fn astype(config: &Map<String, Value>) -> CodecResult<Self> {
        const NAME: &str = "astype";
        let required = |field: &str| {
            parse_dtype(NAME, config, field)?.ok_or_else(|| CodecError::new(NAME, format!("{field} is required")))
        };
        let (dtype, num, _) = required("decode_dtype")?;
        let (astype, astype_num, big) = required("encode_dtype")?;
        Ok(Self {
            name: NAME,
            kind: Kind::AsType,
            dtype: Some((dtype, num)),
            astype: Some((astype, astype_num)),
            astype_big_endian: Some(big),
        })
    }

    /// numcodecs `quantize` (`digits`, `dtype`, optional `astype`).
    ///
    /// # Errors
    /// A missing or non-float dtype, `digits` not an integer in -300..=300.
    pub fn quantize(config: &Map<String, Value>) -> CodecResult<Self> {
        const NAME: &str = "quantize";
        let (dtype, num, big) =
            parse_dtype(NAME, config, "dtype")?.ok_or_else(|| CodecError::new(NAME, "dtype is required"))?;
        let (astype, astype_num, astype_big) =
            parse_dtype(NAME, config, "astype")?.unwrap_or((dtype.clone(), num, big));
        if !num.is_float() || !astype_num.is_float() {
            return Err(CodecError::new(NAME, "only floating point data types are supported"));
        }
        let digits = config
            .get("digits")
            .and_then(Value::as_i64)
            .ok_or_else(|| CodecError::new(NAME, "digits must be an integer"))?;
        Ok(Self {
            name: NAME,
            kind: Kind::Quantize { scale: quantize_scale(digits)? },
            dtype: Some((dtype, num)),
            astype: Some((astype, astype_num)),
            astype_big_endian: Some(astype_big),
        })
    }

    /// numcodecs `bitround` (`keepbits`).
    ///
    /// # Errors
    /// `keepbits` missing or not an integer from 0 to 52.
    pub fn bitround(config: &Map<String, Value>) -> CodecResult<Self> {
        const NAME: &str = "bitround";
        let keepbits = config
            .get("keepbits")
            .and_then(Value::as_u64)
            .and_then(|k| u32::try_from(k).ok())
            .filter(|&k| k <= 52)
            .ok_or_else(|| CodecError::new(NAME, "keepbits must be an integer from 0 to 52"))?;
        Ok(Self { name: NAME, kind: Kind::BitRound { keepbits }, dtype: None, astype: None, astype_big_endian: None })
    }

    /// Whether the encoded elements are big-endian: `Some` when the filter
    /// names its encoded type (`astype`, `quantize`), `None` when the
    /// elements keep the array's order (`bitround`).
    #[must_use]
    pub fn astype_big_endian(&self) -> Option<bool> {
        self.astype_big_endian
    }

    /// The decoded and encoded types of chunks of `decoded`.
    fn types(&self, decoded: &ChunkRepr) -> CodecResult<((DataType, NumType), (DataType, NumType))> {
        let chunk = || {
            NumType::of(&decoded.data_type).map(|n| (decoded.data_type.clone(), n)).ok_or_else(|| {
                CodecError::new(self.name, format!("the chunk's data type {:?} is not numeric", decoded.data_type))
            })
        };
        let dtype = match &self.dtype {
            Some(d) if d.0 == decoded.data_type => d.clone(),
            Some(d) => {
                return Err(CodecError::new(
                    self.name,
                    format!("configured dtype {:?} does not match the chunk's data type {:?}", d.0, decoded.data_type),
                ))
            }
            None => chunk()?,
        };
        if let Kind::BitRound { keepbits } = self.kind {
            match mantissa_bits(dtype.1) {
                None => return Err(CodecError::new(self.name, "only float arrays (16 to 64 bits) can be bit-rounded")),
                Some(bits) if keepbits > bits => {
                    return Err(CodecError::new(
                        self.name,
                        format!("keepbits {keepbits} is more than the {bits} mantissa bits of {:?}", dtype.0),
                    ))
                }
                Some(_) => {}
            }
        }
        let astype = self.astype.clone().unwrap_or_else(|| dtype.clone());
        Ok((dtype, astype))
    }

    fn encode_one(&self, num: NumType, astype: NumType, x: &[u8], out: &mut Vec<u8>) {
        match self.kind {
            Kind::AsType => astype.write(num.read(x), out),
            Kind::Quantize { scale } => {
                // The Python float `scale` is a weak scalar: in the array's precision.
                let scale = num.cast(Num::Float(scale));
                let scaled = num.arith(num.read(x), scale, Op::Mul);
                let rounded = match scaled {
                    Num::Float(f) => Num::Float(f.round_ties_even()),
                    other => other,
                };
                astype.write(num.arith(rounded, scale, Op::Div), out);
            }
            Kind::BitRound { keepbits } => {
                let width = x.len();
                let mut a = [0u8; 8];
                a[..width].copy_from_slice(x);
                let bits = 8 * width as u32;
                // The integer view, sign-extended (numpy's `view('i')`).
                let b = (u64::from_le_bytes(a) << (64 - bits)) as i64 >> (64 - bits);
                let mantissa = mantissa_bits(num).unwrap_or(0);
                let maskbits = mantissa - keepbits;
                let rounded = if maskbits == 0 {
                    b
                } else {
                    let half_quantum = (1i64 << (maskbits - 1)) - 1;
                    let added = b.wrapping_add(((b >> maskbits) & 1) + half_quantum);
                    // Wraps in the element's width, as numpy's in-place add.
                    let added = (added << (64 - bits)) >> (64 - bits);
                    added & (-1i64 << maskbits)
                };
                out.extend_from_slice(&rounded.to_le_bytes()[..width]);
            }
        }
    }

    fn decode_one(&self, num: NumType, astype: NumType, y: &[u8], out: &mut Vec<u8>) {
        match self.kind {
            Kind::AsType | Kind::Quantize { .. } => num.write(astype.read(y), out),
            Kind::BitRound { .. } => out.extend_from_slice(y),
        }
    }

    /// `f` on each element of `data` (`n` elements of `from` bytes), into
    /// elements of `to` bytes.
    fn map(
        &self,
        data: ChunkData,
        n: u64,
        from: usize,
        to: usize,
        mut f: impl FnMut(&[u8], &mut Vec<u8>),
    ) -> CodecResult<Vec<u8>> {
        let bytes = data.into_fixed(self.name, usize::try_from(n).ok().and_then(|n| n.checked_mul(from)))?;
        let mut out = Vec::with_capacity(bytes.len() / from * to);
        for x in bytes.chunks_exact(from) {
            f(x, &mut out);
        }
        Ok(out)
    }
}

impl ArrayToArrayCodec for CastCodec {
    fn name(&self) -> &str {
        self.name
    }

    fn encoded_repr(&self, decoded: &ChunkRepr) -> CodecResult<ChunkRepr> {
        let ((_, num), (astype, astype_num)) = self.types(decoded)?;
        let mut fill_value = Vec::with_capacity(astype_num.size());
        if decoded.fill_value.len() == num.size() {
            self.encode_one(num, astype_num, &decoded.fill_value, &mut fill_value);
        } else {
            fill_value.resize(astype_num.size(), 0);
        }
        Ok(ChunkRepr { shape: decoded.shape.clone(), data_type: astype, fill_value })
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        let ((_, num), (_, astype)) = self.types(decoded)?;
        let out = self.map(data, decoded.num_elements(), num.size(), astype.size(), |x, out| {
            self.encode_one(num, astype, x, out);
        })?;
        Ok(ChunkData::Fixed(out))
    }

    fn decode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        let ((_, num), (_, astype)) = self.types(decoded)?;
        let out = self.map(data, decoded.num_elements(), astype.size(), num.size(), |y, out| {
            self.decode_one(num, astype, y, out);
        })?;
        Ok(ChunkData::Fixed(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    /// Generated with numcodecs 0.16 / numpy 2 in the test venv:
    /// ```python
    /// c = numcodecs.get_codec({"id": id, **cfg}); x = np.array(x, dtype=dt); e = c.encode(x)
    /// print(x.tobytes().hex(), e.astype(e.dtype.newbyteorder("<")).tobytes().hex(),
    ///       c.decode(e).astype(dt).tobytes().hex())
    /// ```
    /// (id, configuration, dtype, x, encoded as little-endian, decoded)
    #[rustfmt::skip]
    const CASES: &[(&str, &str, &str, &str, &str, &str)] = &[
        ("astype", r#"{"encode_dtype": "<i2", "decode_dtype": "<f8"}"#, "<f8", "0000000000000000000000000000f83f9a999999999905c000000000006af84000000000006af8c09a999999f9ffdf40", "00000100feffa0866079ff7f", "0000000000000000000000000000f03f00000000000000c0000000000058dec0000000000058de4000000000c0ffdf40"),
        ("astype", r#"{"encode_dtype": "|u1", "decode_dtype": "<i4"}"#, "<i4", "0000000001000000ff00000000010000ffffffff70110100", "0001ff00ff70", "0000000001000000ff00000000000000ff00000070000000"),
        ("astype", r#"{"encode_dtype": "<f4", "decode_dtype": "<f8"}"#, "<f8", "9a9999999999b93f555555555555d53f9c7500883ce4377e00000000000000800000000000000440", "cdcccc3dabaaaa3e0000807f0000008000002040", "000000a09999b93f000000605555d53f000000000000f07f00000000000000800000000000000440"),
        ("astype", r#"{"encode_dtype": ">f2", "decode_dtype": "<f4"}"#, "<f4", "cdcccc3d00ef7f4777cc2b32000050c0", "662eff7b000080c2", "00c0cc3d00e07f4700000000000050c0"),
        ("quantize", r#"{"digits": 1, "dtype": "<f8"}"#, "<f8", "00000000000000001cc7711cc771bc3f1cc7711cc771cc3f555555555555d53f1cc7711cc771dc3f721cc7711cc7e13f555555555555e53f388ee3388ee3e83f1cc7711cc771ec3f000000000000f03f", "0000000000000000000000000000c03f000000000000d03f000000000000d43f000000000000dc3f000000000000e23f000000000000e63f000000000000e83f000000000000ec3f000000000000f03f", "0000000000000000000000000000c03f000000000000d03f000000000000d43f000000000000dc3f000000000000e23f000000000000e63f000000000000e83f000000000000ec3f000000000000f03f"),
        ("quantize", r#"{"digits": 3, "dtype": "<f4", "astype": "<f2"}"#, "<f4", "5bd3fc3dc3d3adc07600c842d00f4940", "e02f6ec540564842", "0000fc3d00c0adc00000c84200004940"),
        ("quantize", r#"{"digits": -2, "dtype": "<f8", "astype": "<f4"}"#, "<f8", "00000000004a934000000000000049c066666666fe69f8409a9999999999d93f", "00009844000080c20040c34700000000", "000000000000934000000000000050c0000000000068f8400000000000000000"),
        ("quantize", r#"{"digits": 5, "dtype": "<f2"}"#, "<f2", "00384835cdbed063", "00fe00fe00fe00fe", "00fe00fe00fe00fe"),
        ("bitround", r#"{"keepbits": 3}"#, "<f4", "cdcccc3dabaaaa3e54f82dc0caf249716042a28d00004040", "0000d03d0000b03e000030c0000050710000a08d00004040", "0000d03d0000b03e000030c0000050710000a08d00004040"),
        ("bitround", r#"{"keepbits": 10}"#, "<f8", "9a9999999999b93f555555555555d53f9b91048b0abf05c09c7500883ce4377e0100000000000000000000000000f83f", "000000000098b93f000000000054d53f0000000000c005c00000000000e4377e0000000000000000000000000000f83f", "000000000098b93f000000000054d53f0000000000c005c00000000000e4377e0000000000000000000000000000f83f"),
        ("bitround", r#"{"keepbits": 0}"#, "<f2", "662e55356cc1ff7b003e003f", "0030003400c0007c00400040", "0030003400c0007c00400040"),
        ("bitround", r#"{"keepbits": 23}"#, "<f4", "cdcccc3dabaaaa3e", "cdcccc3dabaaaa3e", "cdcccc3dabaaaa3e"),
    ];

    fn codec(id: &str, cfg: &Value) -> CodecResult<CastCodec> {
        let cfg = cfg.as_object().unwrap();
        match id {
            "astype" => CastCodec::astype(cfg),
            "quantize" => CastCodec::quantize(cfg),
            _ => CastCodec::bitround(cfg),
        }
    }

    fn data_type(dt: &str) -> DataType {
        parse_dtype("test", json!({"dtype": dt}).as_object().unwrap(), "dtype").unwrap().unwrap().0
    }

    #[test]
    fn matches_numcodecs() {
        for (id, cfg, dt, x, enc, dec) in CASES {
            let cfg: Value = serde_json::from_str(cfg).unwrap();
            let c = codec(id, &cfg).unwrap();
            let data_type = data_type(dt);
            let size = data_type.size().unwrap();
            let repr = ChunkRepr { shape: vec![(x.len() / 2 / size) as u64], data_type, fill_value: vec![0; size] };
            let e = c.encode(ChunkData::Fixed(hex(x)), &repr).unwrap();
            assert_eq!(e, ChunkData::Fixed(hex(enc)), "encode {id} {cfg}");
            assert_eq!(
                c.decode(ChunkData::Fixed(hex(enc)), &repr).unwrap(),
                ChunkData::Fixed(hex(dec)),
                "decode {id} {cfg}"
            );
        }
    }

    #[test]
    fn configurations_and_chunks_that_do_not_fit_are_refused() {
        let f4 = ChunkRepr { shape: vec![2], data_type: DataType::Float32, fill_value: vec![0; 4] };
        let i4 = ChunkRepr { shape: vec![2], data_type: DataType::Int32, fill_value: vec![0; 4] };
        let e = |id: &str, cfg: Value| codec(id, &cfg).unwrap_err().to_string();
        assert!(e("astype", json!({"decode_dtype": "<f4"})).contains("encode_dtype"));
        assert!(e("astype", json!({"encode_dtype": "|O", "decode_dtype": "<f4"})).contains("encode_dtype"));
        assert!(e("quantize", json!({"digits": 2, "dtype": "<i4"})).contains("floating point"));
        assert!(e("quantize", json!({"digits": 2, "dtype": "<f4", "astype": "<i2"})).contains("floating point"));
        assert!(e("quantize", json!({"digits": 1e9, "dtype": "<f4"})).contains("digits"));
        assert!(e("quantize", json!({"digits": 400, "dtype": "<f4"})).contains("digits"));
        assert!(e("bitround", json!({"keepbits": 53})).contains("keepbits"));
        assert!(e("bitround", json!({"keepbits": -1})).contains("keepbits"));
        // The configured dtype is the chunk's; bitround takes floats with room for its bits.
        let c = codec("astype", &json!({"encode_dtype": "<i2", "decode_dtype": "<f8"})).unwrap();
        assert!(c.encoded_repr(&f4).unwrap_err().to_string().contains("does not match"));
        let c = codec("bitround", &json!({"keepbits": 30})).unwrap();
        assert!(c.encoded_repr(&f4).unwrap_err().to_string().contains("mantissa"));
        assert!(c.encoded_repr(&i4).unwrap_err().to_string().contains("float"));
        let f8 = ChunkRepr { shape: vec![2], data_type: DataType::Float64, fill_value: vec![0; 8] };
        assert_eq!(c.encoded_repr(&f8).unwrap().data_type, DataType::Float64);
        // Stored bytes of the wrong length are refused, never read past.
        let c = codec("astype", &json!({"encode_dtype": "<i2", "decode_dtype": "<f4"})).unwrap();
        assert_eq!(c.encoded_repr(&f4).unwrap().data_type, DataType::Int16);
        assert!(c.decode(ChunkData::Fixed(vec![0; 3]), &f4).is_err());
        assert!(c.decode(ChunkData::Fixed(vec![0; 5]), &f4).is_err());
        assert_eq!(c.decode(ChunkData::Fixed(vec![0; 4]), &f4).unwrap(), ChunkData::Fixed(vec![0; 8]));
    }

    #[test]
    fn fill_values_are_encoded_as_elements() {
        let c = codec("quantize", &json!({"digits": 1, "dtype": "<f8", "astype": "<f4"})).unwrap();
        let fill = 0.3f64.to_le_bytes().to_vec();
        let repr = ChunkRepr { shape: vec![1], data_type: DataType::Float64, fill_value: fill };
        // 0.3 * 16 = 4.8 -> 5 / 16 = 0.3125
        assert_eq!(c.encoded_repr(&repr).unwrap().fill_value, 0.3125f32.to_le_bytes());
    }
}
