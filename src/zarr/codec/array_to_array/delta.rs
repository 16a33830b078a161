//! numcodecs `delta` (v2 filter; v3 `numcodecs.delta`).
//!
//! numcodecs 0.16: encode `enc[0] = arr[0]; enc[1:] = np.diff(arr)` (the
//! difference in `dtype`, then cast to `astype`); decode `np.cumsum(enc,
//! out=dec)`, which sums in `result_type(acc, dtype)` where `acc` is
//! `astype`, widened to a 64-bit integer for smaller integers — checked
//! against numcodecs with the test venv. The chunk is flattened in its
//! stored order (after any transpose).

use serde_json::{Map, Value};

use super::numeric::{parse_dtype, promote, Num, NumType, Op};
use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::{ArrayToArrayCodec, CodecError, CodecResult};
use crate::zarr::data_type::DataType;

const NAME: &str = "delta";

/// A prepared `delta` filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaCodec {
    dtype: DataType,
    num: NumType,
    astype: DataType,
    astype_num: NumType,
    astype_big_endian: bool,
}

impl DeltaCodec {
    /// From a numcodecs configuration (`dtype`, optional `astype`).
    ///
    /// # Errors
    /// A missing or non-numeric `dtype`, a non-numeric `astype`.
    pub fn from_config(config: &Map<String, Value>) -> CodecResult<Self> {
        let (dtype, num, big) =
            parse_dtype(NAME, config, "dtype")?.ok_or_else(|| CodecError::new(NAME, "dtype is required"))?;
        let (astype, astype_num, astype_big_endian) =
            parse_dtype(NAME, config, "astype")?.unwrap_or((dtype.clone(), num, big));
        Ok(Self { dtype, num, astype, astype_num, astype_big_endian })
    }

    /// Whether the encoded elements are big-endian (numcodecs `astype` `>..`).
    #[must_use]
    pub fn astype_big_endian(&self) -> bool {
        self.astype_big_endian
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
}

fn elements(bytes: &[u8], t: NumType) -> impl Iterator<Item = Num> + '_ {
    bytes.chunks_exact(t.size()).map(move |c| t.read(c))
}

impl ArrayToArrayCodec for DeltaCodec {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_repr(&self, decoded: &ChunkRepr) -> CodecResult<ChunkRepr> {
        self.check(decoded)?;
        let mut fill_value = Vec::with_capacity(self.astype_num.size());
        let fill =
            if decoded.fill_value.len() == self.num.size() { self.num.read(&decoded.fill_value) } else { Num::Int(0) };
        self.astype_num.write(fill, &mut fill_value);
        Ok(ChunkRepr { shape: decoded.shape.clone(), data_type: self.astype.clone(), fill_value })
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.check(decoded)?;
        let n = usize::try_from(decoded.num_elements()).map_err(|_| CodecError::new(NAME, "chunk too large"))?;
        let bytes = data.into_fixed(NAME, n.checked_mul(self.num.size()))?;
        let mut out = Vec::with_capacity(n * self.astype_num.size());
        let mut prev: Option<Num> = None;
        for x in elements(&bytes, self.num) {
            let d = match prev {
                None => x,
                Some(p) => self.num.arith(x, p, Op::Sub),
            };
            self.astype_num.write(d, &mut out);
            prev = Some(x);
        }
        Ok(ChunkData::Fixed(out))
    }

    fn decode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.check(decoded)?;
        let n = usize::try_from(decoded.num_elements()).map_err(|_| CodecError::new(NAME, "chunk too large"))?;
        let bytes = data.into_fixed(NAME, n.checked_mul(self.astype_num.size()))?;
        let acc = match self.astype_num {
            NumType::Int { bytes, signed } if bytes < 8 => NumType::Int { bytes: 8, signed },
            t => t,
        };
        let lane = promote(acc, self.num);
        let mut out = Vec::with_capacity(n * self.num.size());
        let mut sum: Option<Num> = None;
        for e in elements(&bytes, self.astype_num) {
            let e = lane.cast(e);
            let s = match sum {
                None => e,
                Some(s) => lane.arith(s, e, Op::Add),
            };
            self.num.write(s, &mut out);
            sum = Some(s);
        }
        Ok(ChunkData::Fixed(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn codec(cfg: Value) -> DeltaCodec {
        DeltaCodec::from_config(cfg.as_object().unwrap()).unwrap()
    }

    fn repr(dt: DataType, n: u64) -> ChunkRepr {
        let size = dt.size().unwrap();
        ChunkRepr { shape: vec![n], data_type: dt, fill_value: vec![0; size] }
    }

    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|x| f(*x)).collect()
    }

    /// Reference values from numcodecs 0.16.6 (see the module docs):
    /// `Delta(dtype, astype).encode(x)` / `.decode(y)` printed with `.tolist()`.
    #[test]
    fn matches_numcodecs() {
        // Delta(dtype='<i2', astype='|i1').encode(np.arange(100, 120, 2, dtype='i2')) -> [100, 2, 2, ...]
        let c = codec(json!({"dtype": "<i2", "astype": "|i1"}));
        let x: Vec<i16> = (100..120).step_by(2).collect();
        let enc = c.encode(ChunkData::Fixed(le(&x, i16::to_le_bytes)), &repr(DataType::Int16, 10)).unwrap();
        let mut want = vec![100u8];
        want.extend([2u8; 9]);
        assert_eq!(enc, ChunkData::Fixed(want));
        let dec = c.decode(enc, &repr(DataType::Int16, 10)).unwrap();
        assert_eq!(dec, ChunkData::Fixed(le(&x, i16::to_le_bytes)));
        // Delta(dtype='<i2', astype='<f8').decode(np.array([0.6, 0.6])) -> [0, 1] (sums in f8, then casts)
        let c = codec(json!({"dtype": "<i2", "astype": "<f8"}));
        let dec = c.decode(ChunkData::Fixed(le(&[0.6f64, 0.6], f64::to_le_bytes)), &repr(DataType::Int16, 2)).unwrap();
        assert_eq!(dec, ChunkData::Fixed(le(&[0i16, 1], i16::to_le_bytes)));
        // Delta(dtype='<f8', astype='<i4').decode([2**31-1, 1]) -> [2147483647.0, 2147483648.0] (no i4 wrap)
        let c = codec(json!({"dtype": "<f8", "astype": "<i4"}));
        let dec =
            c.decode(ChunkData::Fixed(le(&[i32::MAX, 1], i32::to_le_bytes)), &repr(DataType::Float64, 2)).unwrap();
        assert_eq!(dec, ChunkData::Fixed(le(&[2_147_483_647f64, 2_147_483_648.0], f64::to_le_bytes)));
        // Delta(dtype='<f8', astype='<f4').decode([0.1]*3 as f4) sums in f8
        let c = codec(json!({"dtype": "<f8", "astype": "<f4"}));
        let dec = c.decode(ChunkData::Fixed(le(&[0.1f32; 3], f32::to_le_bytes)), &repr(DataType::Float64, 3)).unwrap();
        let want = [0.100_000_001_490_116_12f64, 0.200_000_002_980_232_24, 0.300_000_004_470_348_36];
        assert_eq!(dec, ChunkData::Fixed(le(&want, f64::to_le_bytes)));
        // Delta(dtype='<i1', astype='<f2').decode([100, 100] as f2) -> [100, -56] (f2 sum, wrapping cast)
        let c = codec(json!({"dtype": "|i1", "astype": "<f2"}));
        let hundred = half::f16::from_f32(100.0).to_bits();
        let dec =
            c.decode(ChunkData::Fixed(le(&[hundred, hundred], u16::to_le_bytes)), &repr(DataType::Int8, 2)).unwrap();
        assert_eq!(dec, ChunkData::Fixed(vec![100, (-56i8) as u8]));
        // Delta(dtype='|u1', astype='|i1').decode([-1, -1]) -> [255, 254]
        let c = codec(json!({"dtype": "|u1", "astype": "|i1"}));
        let dec = c.decode(ChunkData::Fixed(vec![0xff, 0xff]), &repr(DataType::UInt8, 2)).unwrap();
        assert_eq!(dec, ChunkData::Fixed(vec![255, 254]));
    }

    #[test]
    fn errors() {
        assert!(DeltaCodec::from_config(json!({}).as_object().unwrap()).is_err());
        assert!(DeltaCodec::from_config(json!({"dtype": "|S4"}).as_object().unwrap()).is_err());
        assert!(DeltaCodec::from_config(json!({"dtype": "<f8", "astype": "x"}).as_object().unwrap()).is_err());
        let c = codec(json!({"dtype": "<i4"}));
        let e = c.decode(ChunkData::Fixed(vec![0; 7]), &repr(DataType::Int32, 2)).unwrap_err();
        assert_eq!(e.codec, "delta");
        assert!(c.encoded_repr(&repr(DataType::Float32, 2)).is_err());
        assert!(c.decode(ChunkData::Variable(vec![]), &repr(DataType::Int32, 0)).is_err());
    }

    proptest! {
        #[test]
        fn integer_round_trip(x in proptest::collection::vec(any::<i32>(), 0..50)) {
            let c = codec(json!({"dtype": "<i4"}));
            let r = repr(DataType::Int32, x.len() as u64);
            let data = ChunkData::Fixed(le(&x, i32::to_le_bytes));
            let enc = c.encode(data.clone(), &r).unwrap();
            prop_assert_eq!(c.decode(enc, &r).unwrap(), data);
        }

        #[test]
        fn u8_as_i16_round_trip(x in proptest::collection::vec(any::<u8>(), 1..50)) {
            let c = codec(json!({"dtype": "|u1", "astype": ">i2"}));
            prop_assert!(c.astype_big_endian());
            let r = repr(DataType::UInt8, x.len() as u64);
            let enc = c.encode(ChunkData::Fixed(x.clone()), &r).unwrap();
            prop_assert_eq!(c.decode(enc, &r).unwrap(), ChunkData::Fixed(x));
        }
    }
}
