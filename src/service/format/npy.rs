//! The `.npy` header.
//!
//! Spec: numpy's `numpy.lib.format` ("NPY format"): the magic
//! `\x93NUMPY`, a version (1.0 with a 2-byte header length, 2.0 with a
//! 4-byte one when the header does not fit 65535 bytes), then a Python
//! dict literal `{'descr': ..., 'fortran_order': False, 'shape': (...), }`
//! padded with spaces and ended by `\n` so that the data starts at a
//! multiple of 64 bytes. The data follows: the elements in C order, as the
//! descr says (zarrd always writes little-endian).

use super::python_tuple;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
