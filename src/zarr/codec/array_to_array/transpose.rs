//! The `transpose` codec (and Zarr v2 `order: "F"`).
//!
//! Spec: Zarr v3 `codecs/transpose`: `order` is a permutation; encoded
//! dimension `i` is decoded dimension `order[i]` (numpy
//! `transpose(order)`). A v2 Fortran-order chunk is the reversing
//! permutation `[n-1, ..., 0]`.

use serde::Serialize;
use serde_json::Value;

use crate::zarr::chunk::{ChunkData, ChunkRepr};
use crate::zarr::codec::registry::{BuiltCodec, CodecConfig, ParseContext};
use crate::zarr::codec::{ArrayToArrayCodec, CodecError, CodecResult};
use crate::zarr::metadata::error::{MetadataError, Result};

const NAME: &str = "transpose";

/// `transpose` codec configuration (v3): `{"order": [...]}`.
///
/// ```
/// # use zarrd::zarr::codec::array_to_array::transpose::TransposeConfig;
/// let c = TransposeConfig { order: vec![1, 0] };
/// assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"order":[1,0]}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransposeConfig {
    /// A permutation of `0..rank`: encoded dimension `i` is decoded
    /// dimension `order[i]`.
    pub order: Vec<usize>,
}

impl TransposeConfig {
    /// Parses a v3 configuration for chunks of the shape entering the
    /// codec, which it permutes for the codecs after it.
    pub(crate) fn parse(cx: &mut ParseContext<'_, '_>) -> Result<Self> {
        let order_path = cx.cfg.at("order");
        let order = permutation(cx.cfg.required("order")?, &order_path, cx.state.shape.len())?;
        cx.cfg.deny_rest("\"order\"")?;
        cx.state.shape = order.iter().filter_map(|&d| cx.state.shape.get(d).copied()).collect();
        Ok(Self { order })
    }

    /// The codec.
    ///
    /// # Errors
    /// `order` is not a permutation (not after parsing).
    pub fn build(&self) -> CodecResult<TransposeCodec> {
        TransposeCodec::new(self.order.clone())
    }
}

impl CodecConfig for TransposeConfig {
    fn to_json(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    fn is_fixed_size(&self) -> bool {
        true
    }

    fn build(&self, _: &ChunkRepr) -> CodecResult<BuiltCodec> {
        Ok(BuiltCodec::ArrayToArray(Box::new(TransposeConfig::build(self)?)))
    }
}

fn permutation(value: &Value, path: &str, rank: usize) -> Result<Vec<usize>> {
    let expected = format!("a permutation of 0..{rank} (one entry per dimension of the {rank}-dimensional chunk)");
    let err = || MetadataError::expected(path, &expected, value);
    let items = value.as_array().ok_or_else(err)?;
    if items.len() != rank {
        return Err(err());
    }
    let mut seen = vec![false; rank];
    let mut order = Vec::with_capacity(rank);
    for item in items {
        let d = item.as_u64().and_then(|d| usize::try_from(d).ok()).filter(|&d| d < rank).ok_or_else(err)?;
        let slot = seen.get_mut(d).ok_or_else(err)?;
        if *slot {
            return Err(err());
        }
        *slot = true;
        order.push(d);
    }
    Ok(order)
}

/// A prepared `transpose` codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransposeCodec {
    order: Vec<usize>,
    inverse: Vec<usize>,
}

impl TransposeCodec {
    /// A transpose by `order`.
    ///
    /// # Errors
    /// When `order` is not a permutation of `0..order.len()`.
    pub fn new(order: Vec<usize>) -> CodecResult<Self> {
        let mut inverse = vec![usize::MAX; order.len()];
        for (i, &d) in order.iter().enumerate() {
            match inverse.get_mut(d) {
                Some(slot) if *slot == usize::MAX => *slot = i,
                _ => return Err(CodecError::new(NAME, format!("order {order:?} is not a permutation"))),
            }
        }
        Ok(Self { order, inverse })
    }

    /// The transpose that stores a chunk in Fortran order (v2 `order: "F"`).
    #[must_use]
    pub fn fortran(rank: usize) -> Self {
        let order: Vec<usize> = (0..rank).rev().collect();
        Self { inverse: order.clone(), order }
    }

    /// The permutation.
    #[must_use]
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    fn check_rank(&self, repr: &ChunkRepr) -> CodecResult<()> {
        if repr.shape.len() == self.order.len() {
            Ok(())
        } else {
            Err(CodecError::new(
                NAME,
                format!(
                    "order {:?} has {} entries but the chunk has {} dimensions",
                    self.order,
                    self.order.len(),
                    repr.shape.len()
                ),
            ))
        }
    }
}

/// Calls `f(source_index)` for each element of `transpose(input, perm)` in C
/// order of the output, where `input` has shape `in_shape`.
fn for_each_source(in_shape: &[u64], perm: &[usize], mut f: impl FnMut(usize)) {
    let rank = in_shape.len();
    if in_shape.contains(&0) {
        return;
    }
    let mut in_strides = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        in_strides[d] = in_strides[d + 1] * in_shape[d + 1] as usize;
    }
    if rank == 0 {
        f(0);
        return;
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| in_shape[p] as usize).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let (last_n, last_s) = (out_shape[rank - 1], strides[rank - 1]);
    let mut counter = vec![0usize; rank - 1];
    let mut base = 0usize;
    loop {
        for j in 0..last_n {
            f(base + j * last_s);
        }
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            counter[d] += 1;
            base += strides[d];
            if counter[d] < out_shape[d] {
                break;
            }
            base -= strides[d] * out_shape[d];
            counter[d] = 0;
        }
    }
}

/// The `N`-byte elements of `bytes` in the order [`for_each_source`] visits
/// them. The element size is a constant so each copy is one load and one
/// store: with a runtime size, a `memcpy` call per element made the codec
/// run at half the speed of a plain loop.
fn gather<const N: usize>(bytes: &[u8], in_shape: &[u64], perm: &[usize]) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    let mut o = 0;
    for_each_source(in_shape, perm, |i| {
        out[o..o + N].copy_from_slice(&bytes[i * N..(i + 1) * N]);
        o += N;
    });
    out
}

/// `transpose(data, perm)` for data of shape `in_shape` described by `repr`'s
/// data type.
fn permute(data: ChunkData, in_shape: &[u64], repr: &ChunkRepr, perm: &[usize]) -> CodecResult<ChunkData> {
    let n = in_shape.iter().try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?));
    let n = n.ok_or_else(|| CodecError::new(NAME, "chunk too large"))?;
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(data);
    }
    match data {
        ChunkData::Fixed(bytes) => {
            let size =
                repr.data_type.size().ok_or_else(|| CodecError::new(NAME, "fixed data for a variable-length type"))?;
            if Some(bytes.len()) != n.checked_mul(size) {
                return Err(CodecError::new(
                    NAME,
                    format!("expected {} bytes, got {}", n.saturating_mul(size), bytes.len()),
                ));
            }
            Ok(ChunkData::Fixed(match size {
                1 => gather::<1>(&bytes, in_shape, perm),
                2 => gather::<2>(&bytes, in_shape, perm),
                4 => gather::<4>(&bytes, in_shape, perm),
                8 => gather::<8>(&bytes, in_shape, perm),
                16 => gather::<16>(&bytes, in_shape, perm),
                _ => {
                    let mut out = Vec::with_capacity(bytes.len());
                    for_each_source(in_shape, perm, |i| out.extend_from_slice(&bytes[i * size..(i + 1) * size]));
                    out
                }
            }))
        }
        ChunkData::Variable(mut items) => {
            if items.len() != n {
                return Err(CodecError::new(NAME, format!("expected {n} elements, got {}", items.len())));
            }
            let mut out = Vec::with_capacity(n);
            for_each_source(in_shape, perm, |i| out.push(std::mem::take(&mut items[i])));
            Ok(ChunkData::Variable(out))
        }
    }
}

impl ArrayToArrayCodec for TransposeCodec {
    fn name(&self) -> &str {
        NAME
    }

    fn encoded_repr(&self, decoded: &ChunkRepr) -> CodecResult<ChunkRepr> {
        self.check_rank(decoded)?;
        let shape = self.order.iter().map(|&d| decoded.shape[d]).collect();
        Ok(ChunkRepr { shape, ..decoded.clone() })
    }

    fn encode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        self.check_rank(decoded)?;
        permute(data, &decoded.shape, decoded, &self.order)
    }

    fn decode(&self, data: ChunkData, decoded: &ChunkRepr) -> CodecResult<ChunkData> {
        let encoded = self.encoded_repr(decoded)?;
        permute(data, &encoded.shape, decoded, &self.inverse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::DataType;
    use proptest::prelude::*;

    fn repr(shape: &[u64], dt: DataType) -> ChunkRepr {
        let fill = vec![0; dt.size().unwrap_or(0)];
        ChunkRepr { shape: shape.to_vec(), data_type: dt, fill_value: fill }
    }

    #[test]
    fn matches_numpy() {
        // np.arange(24, dtype='u1').reshape(2, 3, 4).transpose(2, 0, 1).tobytes()
        let codec = TransposeCodec::new(vec![2, 0, 1]).unwrap();
        let r = repr(&[2, 3, 4], DataType::UInt8);
        let enc = codec.encode(ChunkData::Fixed((0..24).collect()), &r).unwrap();
        let want: Vec<u8> = vec![0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23];
        assert_eq!(enc, ChunkData::Fixed(want));
        assert_eq!(codec.encoded_repr(&r).unwrap().shape, vec![4, 2, 3]);
        assert_eq!(codec.decode(enc, &r).unwrap(), ChunkData::Fixed((0..24).collect()));
    }

    #[test]
    fn errors() {
        assert!(TransposeCodec::new(vec![0, 0]).is_err());
        assert!(TransposeCodec::new(vec![2, 0]).is_err());
        let codec = TransposeCodec::new(vec![1, 0]).unwrap();
        let e = codec.decode(ChunkData::Fixed(vec![0; 5]), &repr(&[2, 3], DataType::UInt8)).unwrap_err();
        assert_eq!(e.codec, "transpose");
        assert!(codec.encoded_repr(&repr(&[2], DataType::UInt8)).is_err());
        assert!(codec.decode(ChunkData::Variable(vec![vec![]; 5]), &repr(&[2, 3], DataType::String)).is_err());
    }

    fn case() -> impl Strategy<Value = (Vec<u64>, Vec<usize>, usize)> {
        (0usize..5).prop_flat_map(|rank| {
            (
                proptest::collection::vec(0u64..5, rank),
                Just((0..rank).collect::<Vec<_>>()).prop_shuffle(),
                prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(16), Just(3)],
            )
        })
    }

    proptest! {
        #[test]
        fn round_trip_and_reference((shape, order, size) in case()) {
            let dt = match size {
                1 => DataType::UInt8,
                2 => DataType::UInt16,
                4 => DataType::Float32,
                8 => DataType::Float64,
                16 => DataType::Complex128,
                _ => DataType::FixedBytes(3),
            };
            let r = repr(&shape, dt);
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n as usize * size).map(|i| (i * 7 % 256) as u8).collect();
            let codec = TransposeCodec::new(order.clone()).unwrap();
            let enc = codec.encode(ChunkData::Fixed(data.clone()), &r).unwrap();
            // Reference: element at encoded index e comes from decoded index d with d[order[i]] = e[i].
            let enc_shape = codec.encoded_repr(&r).unwrap().shape;
            let ChunkData::Fixed(eb) = &enc else { unreachable!() };
            for (k, e) in crate::zarr::subset::ArraySubset::from_shape(&enc_shape).indices().enumerate() {
                let mut d = vec![0u64; shape.len()];
                for i in 0..order.len() { d[order[i]] = e[i]; }
                let lin = d.iter().zip(&shape).fold(0u64, |a, (i, s)| a * s + i) as usize;
                prop_assert_eq!(&eb[k * size..(k + 1) * size], &data[lin * size..(lin + 1) * size]);
            }
            prop_assert_eq!(codec.decode(enc, &r).unwrap(), ChunkData::Fixed(data));
            // Variable-length elements move the same way.
            let items: Vec<Vec<u8>> = (0..n).map(|i| i.to_string().into_bytes()).collect();
            let rv = repr(&shape, DataType::String);
            let enc = codec.encode(ChunkData::Variable(items.clone()), &rv).unwrap();
            prop_assert_eq!(codec.decode(enc, &rv).unwrap(), ChunkData::Variable(items));
        }
    }

    use crate::zarr::codec::registry::parse_for_test as chain;

    #[test]
    fn configuration() {
        use crate::zarr::data_type::DataType as D;
        let entry = serde_json::json!({"name": "transpose", "configuration": {"order": [1, 0]}});
        let specs = chain(serde_json::json!([entry, "bytes"]), &D::UInt8, &[2, 3]).unwrap();
        assert_eq!(specs[0].config::<TransposeConfig>(), Some(&TransposeConfig { order: vec![1, 0] }));
        assert_eq!(serde_json::to_value(&specs[0]).unwrap(), entry);
        assert_eq!(TransposeConfig { order: vec![1, 0] }.build().unwrap().order(), [1, 0]);
        for bad in
            [serde_json::json!([0, 0]), serde_json::json!([0]), serde_json::json!([0, 2]), serde_json::json!("F")]
        {
            let e = chain(
                serde_json::json!([{"name": "transpose", "configuration": {"order": bad}}, "bytes"]),
                &D::UInt8,
                &[2, 3],
            )
            .unwrap_err();
            assert_eq!(e.path, "codecs[0].configuration.order", "{bad}");
        }
        // The codecs after a transpose see the permuted shape: a shard of 3x2 divides into 3x1.
        let sharded = |inner: serde_json::Value| {
            serde_json::json!([entry, {"name": "sharding_indexed", "configuration":
            {"chunk_shape": inner, "codecs": ["bytes"], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}])
        };
        assert!(chain(sharded(serde_json::json!([3, 1])), &D::UInt8, &[2, 3]).is_ok());
        assert!(chain(sharded(serde_json::json!([1, 3])), &D::UInt8, &[2, 3]).is_err());
    }
}
