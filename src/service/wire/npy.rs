//! The `.npy` format, both ways: the header of answers ([`header`]) and
//! bodies decoded for slice writes ([`decode`]).
//!
//! Spec: numpy's `numpy.lib.format` ("NPY format",
//! <https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html>):
//! the magic `\x93NUMPY`, a version (1.0 with a 2-byte header length, 2.0
//! with a 4-byte one when the header does not fit 65535 bytes; 3.0 is 2.0
//! with a UTF-8 header), then a Python dict literal
//! `{'descr': ..., 'fortran_order': False, 'shape': (...), }` padded with
//! spaces and ended by `\n` so that the data starts at a multiple of 64
//! bytes. The data follows: the elements in C order, as the descr says
//! (zarrd always writes little-endian; it reads either byte order and
//! Fortran order).

use super::{count, err, python_tuple, type_name, DecodeError, DecodeResult, Decoded};
use crate::zarr::chunk::ChunkData;
use crate::zarr::data_type::DataType;

const MAGIC: &[u8] = b"\x93NUMPY";
const ALIGN: usize = 64;

/// The header of a `.npy` file of C-order elements of numpy type `descr`
/// (`<f4`, or a structured list) and `shape`.
#[must_use]
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    // A list descr is a Python literal; a type string is quoted.
    let descr = if descr.starts_with('[') { descr.to_string() } else { format!("'{descr}'") };
    let dict = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {}, }}", python_tuple(shape));
    let build = |len_bytes: usize| {
        let unpadded = MAGIC.len() + 2 + len_bytes + dict.len() + 1;
        let pad = (ALIGN - unpadded % ALIGN) % ALIGN;
        let header_len = dict.len() + pad + 1;
        (pad, header_len)
    };
    let (pad, header_len) = build(2);
    let mut out = Vec::with_capacity(MAGIC.len() + 6 + header_len);
    out.extend_from_slice(MAGIC);
    if let Ok(len) = u16::try_from(header_len) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.resize(out.len() + pad, b' ');
    } else {
        let (pad, header_len) = build(4);
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&u32::try_from(header_len).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.resize(out.len() + pad, b' ');
    }
    out.push(b'\n');
    out
}

/// The `.npy` descr of `dt` without its byte-order character.
fn npy_descr(dt: &DataType) -> Option<String> {
    Some(match dt {
        DataType::Bool => "b1".into(),
        DataType::Int8 => "i1".into(),
        DataType::Int16 => "i2".into(),
        DataType::Int32 => "i4".into(),
        DataType::Int64 => "i8".into(),
        DataType::UInt8 => "u1".into(),
        DataType::UInt16 => "u2".into(),
        DataType::UInt32 => "u4".into(),
        DataType::UInt64 => "u8".into(),
        DataType::Float16 => "f2".into(),
        DataType::Float32 => "f4".into(),
        DataType::Float64 => "f8".into(),
        DataType::Complex64 => "c8".into(),
        DataType::Complex128 => "c16".into(),
        DataType::DateTime64(u) => format!("M8[{u}]"),
        DataType::TimeDelta64(u) => format!("m8[{u}]"),
        DataType::FixedBytes(n) => format!("S{n}"),
        DataType::FixedUtf32(n) => format!("U{n}"),
        DataType::RawBits(n) | DataType::RawBytes(n) => format!("V{n}"),
        _ => return None,
    })
}

/// The value of `'key': ...` in an npy header dict, as text.
fn header_field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(q) = rest.strip_prefix('\'') {
        return q.split_once('\'').map(|(v, _)| v);
    }
    if rest.starts_with('(') {
        return rest.split_once(')').map(|(v, _)| &v[1..]);
    }
    Some(rest.split([',', '}']).next().unwrap_or("").trim())
}

/// Decodes an `.npy` body for a selection of `shape` of an array of `dt`.
///
/// # Errors
/// A body that is not `.npy`, or whose dtype or shape does not fit; the
/// message says what was expected.
pub fn decode(body: &[u8], dt: &DataType, shape: &[u64]) -> DecodeResult<Decoded> {
    let bad = |why: &str| DecodeError(format!("npy body: {why}"));
    if body.len() < 10 || &body[..6] != b"\x93NUMPY" {
        return Err(bad("does not start with the .npy magic `\\x93NUMPY`"));
    }
    let (header_len, start): (usize, usize) = match body[6] {
        1 => (usize::from(u16::from_le_bytes([body[8], body[9]])), 10),
        2 | 3 if body.len() >= 12 => {
            let len = u32::from_le_bytes([body[8], body[9], body[10], body[11]]);
            (usize::try_from(len).map_err(|_| bad("header too long"))?, 12)
        }
        v => return Err(bad(&format!("format version {v} is not 1, 2 or 3"))),
    };
    let end = start.checked_add(header_len).filter(|&e| e <= body.len()).ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(&body[start..end]).map_err(|_| bad("header is not text"))?;
    let descr = header_field(header, "descr").ok_or_else(|| bad("header has no 'descr' string"))?;
    let Some(want) = npy_descr(dt) else {
        return err(format!("npy body: {} arrays cannot be written from .npy; send raw bytes or JSON", type_name(dt)));
    };
    let (order, got) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('|', descr),
    };
    let size = dt.size().unwrap_or(1);
    let show = if size > 1 && dt.swap_unit() > 1 { format!("<{want}") } else { format!("|{want}") };
    if got != want {
        return err(format!(
            "npy body: dtype '{descr}' does not match the array's {} (expected '{show}')",
            type_name(dt)
        ));
    }
    let fortran = match header_field(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        _ => return Err(bad("header has no 'fortran_order' True or False")),
    };
    let shape_text = header_field(header, "shape").ok_or_else(|| bad("header has no 'shape' tuple"))?;
    let npy_shape: Vec<u64> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| bad(&format!("shape item `{s}` is not a length"))))
        .collect::<DecodeResult<_>>()?;
    let scalar = npy_shape.is_empty() && !shape.is_empty();
    if !scalar && npy_shape != shape {
        return err(format!(
            "npy body: shape {npy_shape:?} does not match the selection's shape {shape:?} (or () for one value, broadcast)"
        ));
    }
    let n = count(&npy_shape)?;
    let data = &body[end..];
    if Some(data.len()) != n.checked_mul(size) {
        return err(format!(
            "npy body: shape {npy_shape:?} of '{descr}' needs {} data bytes, got {}",
            n.saturating_mul(size),
            data.len()
        ));
    }
    let mut bytes = data.to_vec();
    let unit = dt.swap_unit();
    if order == '>' {
        // The codec's vectorised swap (a no-op for one-byte units).
        crate::zarr::codec::byte_layout_decode(&mut bytes, unit);
    }
    if fortran && npy_shape.len() > 1 {
        bytes = fortran_to_c(&bytes, &npy_shape, size);
    }
    Ok(Decoded { data: ChunkData::Fixed(bytes), scalar })
}

/// Reorders Fortran-order elements into C order.
fn fortran_to_c(src: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    #[allow(clippy::cast_possible_truncation)] // the data is in memory
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut f_strides = vec![1usize; dims.len()];
    for d in 1..dims.len() {
        f_strides[d] = f_strides[d - 1] * dims[d - 1];
    }
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(src.len());
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        let off: usize = idx.iter().zip(&f_strides).map(|(i, s)| i * s).sum::<usize>() * size;
        out.extend_from_slice(&src[off..off + size]);
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': ({shape}), }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn fixed(d: &Decoded) -> &[u8] {
        match &d.data {
            ChunkData::Fixed(b) => b,
            ChunkData::Variable(_) => panic!("variable"),
        }
    }

    #[test]
    fn version_1_header_is_aligned_and_parses() {
        let h = header("<f4", &[3, 4]);
        assert_eq!(&h[..6], MAGIC);
        assert_eq!(&h[6..8], &[1, 0]);
        assert_eq!(h.len() % 64, 0);
        let len = usize::from(u16::from_le_bytes([h[8], h[9]]));
        assert_eq!(len + 10, h.len());
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"), "{text}");
        assert!(text.ends_with('\n'));
        let scalar = header("|b1", &[]);
        assert!(std::str::from_utf8(&scalar[10..]).unwrap().contains("'shape': ()"));
    }

    #[test]
    fn huge_headers_use_version_2() {
        let fields: Vec<String> = (0..9000).map(|i| format!("('f{i}', '<i4')")).collect();
        let descr = format!("[{}]", fields.join(", "));
        let h = header(&descr, &[7]);
        assert_eq!(&h[6..8], &[2, 0]);
        assert_eq!(h.len() % 64, 0);
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        assert_eq!(len + 12, h.len());
        assert!(std::str::from_utf8(&h[12..]).unwrap().starts_with("{'descr': [('f0', '<i4')"));
    }

    #[test]
    fn npy_checks_dtype_and_shape_and_converts_order() {
        let body = npy("<u2", false, "2,", &[1, 0, 2, 0]);
        assert_eq!(fixed(&decode(&body, &DataType::UInt16, &[2]).unwrap()), &[1, 0, 2, 0]);
        let body = npy(">u2", false, "2,", &[0, 1, 0, 2]);
        assert_eq!(fixed(&decode(&body, &DataType::UInt16, &[2]).unwrap()), &[1, 0, 2, 0]);
        // Fortran order [[1, 2, 3], [4, 5, 6]] is stored 1 4 2 5 3 6.
        let body = npy("|u1", true, "2, 3", &[1, 4, 2, 5, 3, 6]);
        assert_eq!(fixed(&decode(&body, &DataType::UInt8, &[2, 3]).unwrap()), &[1, 2, 3, 4, 5, 6]);
        let scalar = decode(&npy("|u1", false, "", &[9]), &DataType::UInt8, &[4]).unwrap();
        assert!(scalar.scalar);
        let e = decode(&npy("<f4", false, "2,", &[0; 8]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("'<f4'") && e.contains("expected '<u2'"), "{e}");
        let e = decode(&npy("<u2", false, "3,", &[0; 6]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("shape [3]") && e.contains("[2]"), "{e}");
        let e = decode(&npy("<u2", false, "2,", &[0; 3]), &DataType::UInt16, &[2]).unwrap_err().0;
        assert!(e.contains("needs 4 data bytes, got 3"), "{e}");
        assert!(decode(b"not npy at all", &DataType::UInt8, &[1]).unwrap_err().0.contains("magic"));
    }
}
