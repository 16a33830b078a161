//! numcodecs `fixedscaleoffset` (v2 filter; v3 `numcodecs.fixedscaleoffset`).
//!
//! numcodecs 0.16: encode `np.around((x - offset) * scale).astype(astype)`;
//! decode `((y / scale) + offset).astype(dtype)`. numpy 2 treats `offset`
//! and `scale` as "weak" Python scalars (NEP 50): with a float array the
//! arithmetic stays in the array's precision; with an integer array an
//! integer `offset`/`scale` keeps integer (wrapping) arithmetic and a float
//! one moves to float64. `np.around` rounds half to even. Integer `/` is
//! true division (float64). Checked against numcodecs with the test venv.

use serde_json::{Map, Value};

use super::numeric::{parse_dtype, parse_number, Num, NumType, Op};
use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::{ArrayToArrayCodec, CodecError, CodecResult};
use crate::zarr::data_type::DataType;

const NAME: &str = "fixedscaleoffset";

/// A prepared `fixedscaleoffset` filter.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedScaleOffsetCodec {
    offset: Num,
    scale: Num,
    dtype: DataType,
    num: NumType,
    astype: DataType,
    astype_num: NumType,
    astype_big_endian: bool,
}

/// `a op b` where `b` is a weak Python scalar: in `t` when `t` is a float
/// type or both are integers, else in float64.
fn weak(t: NumType, a: Num, b: Num, op: Op) -> (NumType, Num) {
    match (t, b) {
        (NumType::Int { .. }, Num::Float(_)) => (NumType::F64, NumType::F64.arith(a, b, op)),
        (NumType::Int { .. }, Num::Int(_)) if op == Op::Div => (NumType::F64, NumType::F64.arith(a, b, op)),
        _ => (t, t.arith(a, t.cast(b), op)),
    }
}

impl FixedScaleOffsetCodec {
    /// From a numcodecs configuration (`offset`, `scale`, `dtype`, optional `astype`).
    ///
    /// # Errors
    /// Missing or non-numeric members.
    pub fn from_config(config: &Map<String, Value>) -> CodecResult<Self> {
        let (dtype, num, big) =
            parse_dtype(NAME, config, "dtype")?.ok_or_else(|| CodecError::new(NAME, "dtype is required"))?;
        let (astype, astype_num, astype_big_endian) =
            parse_dtype(NAME, config, "astype")?.unwrap_or((dtype.clone(), num, big));
        let offset = parse_number(NAME, config, "offset")?;
        let scale = parse_number(NAME, config, "scale")?;
        Ok(Self { offset, scale, dtype, num, astype, astype_num, astype_big_endian })
    }

    /// Whether the encoded elements are big-endian.
    #[must_use]
    pub fn astype_big_endian(&self) -> bool {
        self.astype_big_endian
    }

    fn encode_one(&self, x: Num, out: &mut Vec<u8>) {
        let (t, v) = weak(self.num, x, self.offset, Op::Sub);
        let (t, v) = weak(t, v, self.scale, Op::Mul);
        let v = match v {
            Num::Float(f) if t.is_float() => Num::Float(f.round_ties_even()),
            other => other,
        };
        self.astype_num.write(v, out);
    }

    fn decode_one(&self, y: Num, out: &mut Vec<u8>) {
        let (t, v) = weak(self.astype_num, y, self.scale, Op::Div);
        let (_, v) = weak(t, v, self.offset, Op::Add);
        self.num.write(v, out);
    }

    fn check(&self, decoded: &ChunkRepr) -> CodecResult<()> {
        if decoded.data_type == self.dtype {
            Ok(())
        } else {
            Err(CodecError::new(
                NAME,
                format!(
                    "configured dtype {:?} does not match the chunk's data type {:?}",
                    self.dtype, decoded.data_type
                ),
            ))
        }
    }

    fn bytes(data: ChunkData, n: u64, size: usize) -> CodecResult<Vec<u8>> {
        data.into_fixed(NAME, usize::try_from(n).ok().and_then(|n| n.checked_mul(size)))
    }
}

impl ArrayToArrayCodec for FixedScaleOffsetCodec {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_repr(&self, decoded: &ChunkRepr) -> CodecResult<ChunkRepr> {
        self.check(decoded)?;
        let mut fill_value = Vec::with_capacity(self.astype_num.size());
        if decoded.fill_value.len() == self.num.size() {
            self.encode_one(self.num.read(&decoded.fill_value), &mut fill_value);
        } else {
            fill_value.resize(self.astype_num.size(), 0);
        }
        Ok(ChunkRepr { shape: decoded.shape.clone(), data_type: self.astype.clone(), fill_value })
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.check(decoded)?;
        let bytes = Self::bytes(data, decoded.num_elements(), self.num.size())?;
        let mut out = Vec::with_capacity(bytes.len() / self.num.size() * self.astype_num.size());
        for c in bytes.chunks_exact(self.num.size()) {
            self.encode_one(self.num.read(c), &mut out);
        }
        Ok(ChunkData::Fixed(out))
    }

    fn decode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.check(decoded)?;
        let bytes = Self::bytes(data, decoded.num_elements(), self.astype_num.size())?;
        let mut out = Vec::with_capacity(bytes.len() / self.astype_num.size() * self.num.size());
        for c in bytes.chunks_exact(self.astype_num.size()) {
            self.decode_one(self.astype_num.read(c), &mut out);
        }
        Ok(ChunkData::Fixed(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
    }

    /// Generated with numcodecs 0.16.6 / numpy 2:
    /// ```python
    /// c = numcodecs.FixedScaleOffset(**cfg); x = np.array(x, dtype=dt); e = c.encode(x)
    /// print(x.tobytes().hex(), e.tobytes().hex(), c.decode(e).tobytes().hex())
    /// ```
    const CASES: &[(&str, &str, &str, &str, &str)] = &[
        // offset=1000, scale=10, f8 -> u1, x = np.linspace(1000, 1001, 10)
        (r#"{"offset":1000,"scale":10,"dtype":"<f8","astype":"|u1"}"#, "<f8",
         "0000000000408f408ee3388ee3408f401cc7711cc7418f40abaaaaaaaa428f40398ee3388e438f40c7711cc771448f405555555555458f40e4388ee338468f40721cc7711c478f400000000000488f40",
         "0001020304060708090a",
         "0000000000408f40cdcccccccc408f409a99999999418f406666666666428f403333333333438f40cdcccccccc448f409a99999999458f406666666666468f403333333333478f400000000000488f40"),
        // f4 arithmetic, round half to even, x = [1000.3, 1001.7, 999.1, 1000.5, 1000.7]
        (r#"{"offset":1000.5,"scale":2.5,"dtype":"<f4","astype":"<i2"}"#, "<f4",
         "33137a44cd6c7a4466c6794400207a44cd2c7a44", "ffff0300fcff00000100", "66067a44cd6c7a449ab9794400207a449a397a44"),
        // integer arithmetic wraps in i2, then i1: x = [3, 4, 5, -10, 70]
        (r#"{"offset":3,"scale":2,"dtype":"<i2","astype":"|i1"}"#, "<i2",
         "030004000500f6ff4600", "000204e686", "030004000500f6ffc6ff"),
        // float offset on an int array moves to f8: x = [0, 1, 2, 3, -3]
        (r#"{"offset":0.5,"scale":1,"dtype":"<i4","astype":"<i2"}"#, "<i4",
         "00000000010000000200000003000000fdffffff", "0000000002000200fcff", "00000000000000000200000002000000fdffffff"),
        // f2 arithmetic, big-endian astype: x = [1, 3, 5, 7, 100.5]
        (r#"{"offset":0,"scale":0.5,"dtype":"<f2","astype":">u2"}"#, "<f2",
         "003c0042004500474856", "00000002000200040032", "00000044004400484056"),
        // u1 wraps, then f4: x = [0, 1, 255, 7]
        (r#"{"offset":2,"scale":3,"dtype":"|u1","astype":"<f4"}"#, "|u1",
         "0001ff07", "00007a4300007d430000774300007041", "55565407"),
        (r#"{"offset":2,"scale":0.3,"dtype":"|u1","astype":"<u2"}"#, "|u1", "0001ff07", "4c004c004c000200", "ffffff08"),
    ];

    #[test]
    fn matches_numcodecs() {
        for (cfg, _, x, enc, dec) in CASES {
            let cfg: Value = serde_json::from_str(cfg).unwrap();
            let c = FixedScaleOffsetCodec::from_config(cfg.as_object().unwrap()).unwrap();
            let size = c.num.size();
            let repr = ChunkRepr {
                shape: vec![(x.len() / 2 / size) as u64],
                data_type: c.dtype.clone(),
                fill_value: vec![0; size],
            };
            let mut e = c.encode(ChunkData::Fixed(hex(x)), &repr).unwrap();
            // The bytes codec applies the astype byte order; here compare little-endian values.
            if c.astype_big_endian() {
                let ChunkData::Fixed(b) = &mut e else { unreachable!() };
                b.chunks_exact_mut(c.astype_num.size()).for_each(<[u8]>::reverse);
            }
            assert_eq!(e, ChunkData::Fixed(hex(enc)), "encode {cfg}");
            let mut stored = hex(enc);
            if c.astype_big_endian() {
                stored.chunks_exact_mut(c.astype_num.size()).for_each(<[u8]>::reverse);
            }
            assert_eq!(c.decode(ChunkData::Fixed(stored), &repr).unwrap(), ChunkData::Fixed(hex(dec)), "decode {cfg}");
        }
    }

    #[test]
    fn errors() {
        let cfg = |v: Value| FixedScaleOffsetCodec::from_config(v.as_object().unwrap());
        assert!(cfg(json!({"scale": 1, "dtype": "<f8"})).is_err());
        assert!(cfg(json!({"offset": "x", "scale": 1, "dtype": "<f8"})).is_err());
        assert!(cfg(json!({"offset": 0, "scale": 1})).is_err());
        let c = cfg(json!({"offset": 0, "scale": 1, "dtype": "<f8", "astype": "<i4"})).unwrap();
        let r = ChunkRepr { shape: vec![2], data_type: DataType::Float64, fill_value: vec![0; 8] };
        let e = c.decode(ChunkData::Fixed(vec![0; 7]), &r).unwrap_err();
        assert_eq!(e.codec, "fixedscaleoffset");
        assert_eq!(c.encoded_repr(&r).unwrap().data_type, DataType::Int32);
    }

    proptest! {
        #[test]
        fn integers_survive_a_unit_scale(x in proptest::collection::vec(-1000i32..1000, 0..40)) {
            let c = FixedScaleOffsetCodec::from_config(json!({"offset": 7, "scale": 1, "dtype": "<i4", "astype": "<i4"}).as_object().unwrap()).unwrap();
            let r = ChunkRepr { shape: vec![x.len() as u64], data_type: DataType::Int32, fill_value: vec![0; 4] };
            let data = ChunkData::Fixed(x.iter().flat_map(|v| v.to_le_bytes()).collect());
            let enc = c.encode(data.clone(), &r).unwrap();
            prop_assert_eq!(c.decode(enc, &r).unwrap(), data);
        }

        #[test]
        fn floats_within_half_a_step(x in proptest::collection::vec(-100.0f64..100.0, 0..40)) {
            let c = FixedScaleOffsetCodec::from_config(json!({"offset": 1.5, "scale": 100, "dtype": "<f8", "astype": "<i4"}).as_object().unwrap()).unwrap();
            let r = ChunkRepr { shape: vec![x.len() as u64], data_type: DataType::Float64, fill_value: vec![0; 8] };
            let enc = c.encode(ChunkData::Fixed(x.iter().flat_map(|v| v.to_le_bytes()).collect()), &r).unwrap();
            let ChunkData::Fixed(dec) = c.decode(enc, &r).unwrap() else { unreachable!() };
            for (a, b) in x.iter().zip(dec.chunks_exact(8)) {
                let b = f64::from_le_bytes(b.try_into().unwrap());
                prop_assert!((a - b).abs() <= 0.005 + 1e-9);
            }
        }
    }
}
