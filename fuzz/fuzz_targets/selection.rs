//! Query text (and JSON bodies) as a selection, checked against a shape.
//!
//! Input: byte 0 picks the mode (basic, orthogonal, coordinate) and whether
//! the rest is a JSON body or `sel=` text; byte 1 the rank (0..=32); one
//! byte per dimension picks its length from a table running from 0 to
//! `u64::MAX`; the rest is the text. What must hold, beyond "no panic":
//! - a selection that resolves has one indexer per dimension, every index
//!   inside its dimension, and (coordinate) lists of one length;
//! - its result shape and element count agree with the indexers;
//! - memory stays proportional to the input (`-rss_limit_mb=512`): nothing
//!   is expanded to a dimension's length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrd::zarr::selection::{DimIndexer, Selection, SelectionJson, SelectionMode, SelectionSpec};

/// Dimension lengths, from empty to the largest a shape can declare.
const LENGTHS: [u64; 12] = [0, 1, 2, 3, 7, 10, 100, 4096, 1 << 31, 1 << 53, 1 << 62, u64::MAX];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let mode = [SelectionMode::Basic, SelectionMode::Orthogonal, SelectionMode::Coordinate][usize::from(data[0] % 3)];
    let json = data[0] & 0x80 != 0;
    let rank = usize::from(data[1] % 33).min(data.len() - 2);
    let shape: Vec<u64> = data[2..2 + rank].iter().map(|b| LENGTHS[usize::from(*b) % LENGTHS.len()]).collect();
    let rest = &data[2 + rank..];
    let names: Vec<Option<String>> = (0..rank).map(|i| Some(format!("d{i}"))).collect();
    let spec = if json {
        let Ok(sj) = serde_json::from_slice::<SelectionJson>(rest) else { return };
        match sj.to_spec() {
            Ok(s) => s,
            Err(e) => {
                assert!(!e.0.is_empty());
                return;
            }
        }
    } else {
        let Ok(text) = std::str::from_utf8(rest) else { return };
        match SelectionSpec::parse(text, mode) {
            Ok(s) => s,
            Err(e) => {
                assert!(!e.0.is_empty(), "an error names what is wrong");
                return;
            }
        }
    };
    for names in [None, Some(names.as_slice())] {
        match spec.resolve(&shape, names) {
            Ok(sel) => check(&sel, &shape),
            Err(e) => assert!(e.0.contains("dimension") || e.0.contains("selection"), "{e}"),
        }
    }
});

fn check(sel: &Selection, shape: &[u64]) {
    assert_eq!(sel.dims.len(), shape.len());
    for (d, (ix, &n)) in sel.dims.iter().zip(shape).enumerate() {
        if let Some((lo, hi)) = ix.bounds() {
            assert!(lo < hi && hi <= n, "dimension {d}: bounds {lo}..{hi} outside 0..{n}");
        } else {
            assert_eq!(ix.len(), 0);
        }
        match ix {
            DimIndexer::Slice { len, step, .. } if *len > 1 => assert_ne!(*step, 0),
            DimIndexer::List(v) => assert!(v.iter().all(|&i| i < n)),
            _ => {}
        }
        // A few indices, first and last, are inside the dimension.
        for i in [0, ix.len() / 2, ix.len().saturating_sub(1)] {
            if i < ix.len() {
                assert!(ix.get(i) < n, "dimension {d}: index {} of {n}", ix.get(i));
            }
        }
    }
    let shape_out = sel.result_shape();
    if sel.mode == SelectionMode::Coordinate {
        let lens: Vec<u64> = sel.dims.iter().map(DimIndexer::len).collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]), "coordinate lists of one length: {lens:?}");
        assert_eq!(shape_out.len(), 1);
    } else {
        let kept = sel.dims.iter().filter(|d| d.keeps_dim()).count();
        assert_eq!(shape_out.len(), kept);
        let n = sel.dims.iter().map(DimIndexer::len).fold(1u64, u64::saturating_mul);
        assert_eq!(sel.num_elements(), n);
    }
}
