use super::*;

fn idx(d: &DimIndexer) -> Vec<u64> {
    (0..d.len()).map(|i| d.get(i)).collect()
}

/// `(n, start, stop, step, list(range(n))[slice(start, stop, step)])`.
type SliceCase = (u64, Option<i64>, Option<i64>, Option<i64>, Vec<u64>);

/// Expected values computed with CPython.
#[test]
fn slices_resolve_as_python_does() {
    let cases: Vec<SliceCase> = vec![
        (10, Some(2), Some(4), Some(-2), vec![]),
        (0, Some(-12), Some(-12), None, vec![]),
        (10, Some(-3), None, Some(-2), vec![7, 5, 3, 1]),
        (0, Some(-12), Some(4), Some(3), vec![]),
        (0, Some(0), Some(4), Some(1), vec![]),
        (0, Some(-12), None, Some(-2), vec![]),
        (1, Some(11), Some(-1), Some(-5), vec![]),
        (1, Some(-3), Some(-1), None, vec![]),
        (1, Some(11), Some(0), Some(-1), vec![]),
        (10, Some(11), None, Some(-2), vec![9, 7, 5, 3, 1]),
        (1, Some(11), Some(-1), Some(-2), vec![]),
        (5, Some(-12), Some(0), Some(3), vec![]),
        (10, Some(11), Some(-1), None, vec![]),
        (10, Some(0), Some(-12), Some(3), vec![]),
        (5, Some(0), Some(12), Some(1), vec![0, 1, 2, 3, 4]),
        (10, None, Some(12), Some(-1), vec![]),
        (10, Some(11), Some(12), Some(-5), vec![]),
        (0, Some(-12), Some(12), Some(-2), vec![]),
        (5, Some(-12), Some(-1), Some(-2), vec![]),
        (1, None, Some(-1), Some(-2), vec![]),
        (10, Some(-3), Some(4), Some(2), vec![]),
        (0, Some(0), Some(-1), Some(-5), vec![]),
        (10, Some(0), Some(12), Some(1), vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (0, Some(0), None, Some(-2), vec![]),
        (1, None, Some(12), Some(-5), vec![]),
        (0, Some(11), Some(-12), Some(2), vec![]),
        (0, Some(-3), Some(-12), Some(-1), vec![]),
        (0, None, Some(4), Some(-5), vec![]),
        (1, Some(-3), Some(-1), Some(-5), vec![]),
        (10, Some(-12), Some(-12), Some(-5), vec![]),
        (5, Some(11), None, Some(2), vec![]),
        (0, Some(0), Some(-1), Some(3), vec![]),
        (0, Some(2), Some(-12), Some(1), vec![]),
        (1, Some(0), Some(-1), Some(-1), vec![]),
        (5, None, Some(0), Some(2), vec![]),
        (10, Some(-12), Some(-1), Some(3), vec![0, 3, 6]),
        (1, Some(-12), Some(-1), Some(3), vec![]),
        (0, Some(2), Some(-12), Some(-2), vec![]),
        (1, Some(11), Some(4), Some(-1), vec![]),
        (1, Some(0), Some(4), Some(-5), vec![]),
        (5, Some(11), Some(-1), Some(-5), vec![]),
        (1, Some(-3), Some(4), Some(2), vec![0]),
        (1, Some(0), Some(4), Some(3), vec![0]),
        (5, Some(0), Some(-12), Some(-1), vec![0]),
        (5, None, None, Some(-5), vec![4]),
        (10, Some(11), Some(-12), Some(2), vec![]),
        (5, Some(0), Some(0), Some(1), vec![]),
        (10, Some(-3), None, Some(2), vec![7, 9]),
        (0, Some(11), Some(4), Some(3), vec![]),
        (5, Some(0), Some(-12), Some(3), vec![]),
        (0, Some(11), Some(0), Some(2), vec![]),
        (5, Some(0), Some(12), Some(-1), vec![]),
        (5, Some(-12), Some(0), Some(1), vec![]),
        (1, Some(11), Some(4), None, vec![]),
        (5, None, Some(-12), Some(-1), vec![4, 3, 2, 1, 0]),
        (1, Some(-3), Some(-12), None, vec![]),
        (5, Some(-3), Some(12), Some(1), vec![2, 3, 4]),
        (1, Some(0), Some(-1), Some(1), vec![]),
        (0, None, Some(12), Some(2), vec![]),
        (1, Some(11), Some(0), Some(1), vec![]),
    ];
    for (n, start, stop, step, expected) in cases {
        let d = resolve_slice(start, stop, step, n);
        assert_eq!(idx(&d), expected, "n={n} slice({start:?}, {stop:?}, {step:?})");
        let b = d.bounds();
        match (expected.iter().min(), expected.iter().max()) {
            (Some(&lo), Some(&hi)) => assert_eq!(b, Some((lo, hi + 1))),
            _ => assert_eq!(b, None),
        }
    }
}

#[test]
fn text_form_parses_every_kind_of_dimension() {
    let s = SelectionSpec::parse("1, -2 , 3:, :4, ::2, 5:1:-1, [1,-1;2], ...", SelectionMode::Basic).unwrap();
    assert_eq!(
        s.dims,
        vec![
            DimSpec::Index(1),
            DimSpec::Index(-2),
            DimSpec::Slice { start: Some(3), stop: None, step: None },
            DimSpec::Slice { start: None, stop: Some(4), step: None },
            DimSpec::Slice { start: None, stop: None, step: Some(2) },
            DimSpec::Slice { start: Some(5), stop: Some(1), step: Some(-1) },
            DimSpec::List(vec![1, -1, 2]),
            DimSpec::Ellipsis,
        ]
    );
    assert_eq!(SelectionSpec::parse("", SelectionMode::Basic).unwrap().dims, vec![]);
    assert_eq!(SelectionSpec::parse("[]", SelectionMode::Basic).unwrap().dims, vec![DimSpec::List(vec![])]);
}

#[test]
fn text_form_errors_name_the_dimension() {
    for (text, needle) in [
        ("0,x", "dimension 1: expected an integer, got `x`"),
        ("0,1:2:0", "dimension 1: slice step must not be zero"),
        ("1:2:3:4", "dimension 0: a slice is"),
        ("0,,1", "dimension 1: empty"),
        ("[1,2", "unbalanced"),
        ("[[1]]", "nested"),
        ("t=0,1", "either name every dimension"),
    ] {
        let e = SelectionSpec::parse(text, SelectionMode::Basic).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn resolve_fills_trailing_dims_and_expands_ellipsis() {
    let shape = [4, 5, 6];
    let s = SelectionSpec::parse("1", SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
    assert_eq!(s.result_shape(), vec![5, 6]);
    assert_eq!(s.as_box(), Some((vec![1, 0, 0], vec![1, 5, 6])));
    let s = SelectionSpec::parse("...,-1", SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
    assert_eq!(s.dims[2], DimIndexer::Index(5));
    assert_eq!(s.result_shape(), vec![4, 5]);
    let s = SelectionSpec::parse("0, ..., 2, 3", SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
    assert_eq!(s.dims, vec![DimIndexer::Index(0), DimIndexer::Index(2), DimIndexer::Index(3)]);
    assert_eq!(s.result_shape(), Vec::<u64>::new());
    assert_eq!(s.num_elements(), 1);
    let s = SelectionSpec::parse("::2", SelectionMode::Basic).unwrap().resolve(&shape, None).unwrap();
    assert_eq!(s.as_box(), None, "strided is not a box");
    assert_eq!(s.result_shape(), vec![2, 5, 6]);
}

#[test]
fn resolve_errors_name_the_dimension_and_bound() {
    let names = [Some("t".to_string()), None, Some("x".to_string())];
    let shape = [4, 5, 6];
    for (text, needle) in [
        ("0,5", "dimension 1: index 5 is out of bounds for length 5"),
        ("0,0,-7", "dimension 2 (`x`): index -7 is out of bounds for length 6"),
        ("0,[0,9]", "dimension 1: index 9 is out of bounds"),
        ("0,0,0,0", "4 dimensions given, but the array has 3"),
        ("...,0,...", "at most one `...`"),
        ("y=1", "no dimension named `y`"),
        ("t=1,t=2", "dimension `t` given twice"),
    ] {
        let e = SelectionSpec::parse(text, SelectionMode::Basic)
            .and_then(|s| s.resolve(&shape, Some(&names)))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn named_dimensions_select_by_name() {
    let names = [Some("t".to_string()), Some("y".to_string()), Some("x".to_string())];
    let s =
        SelectionSpec::parse("x=1:3, t=-1", SelectionMode::Basic).unwrap().resolve(&[4, 5, 6], Some(&names)).unwrap();
    assert_eq!(s.dims[0], DimIndexer::Index(3));
    assert_eq!(s.dims[1], DimIndexer::Slice { start: 0, step: 1, len: 5 });
    assert_eq!(s.dims[2], DimIndexer::Slice { start: 1, step: 1, len: 2 });
}

#[test]
fn lists_make_orthogonal_and_coordinate_selections() {
    let s = SelectionSpec::parse("[3,0,3],1:3", SelectionMode::Basic).unwrap().resolve(&[4, 5], None).unwrap();
    assert_eq!(s.mode, SelectionMode::Orthogonal);
    assert_eq!(s.result_shape(), vec![3, 2]);
    assert_eq!(s.dims[0].bounds(), Some((0, 4)));
    let s =
        SelectionSpec::parse("[3,0,-1],[1,2,4]", SelectionMode::Coordinate).unwrap().resolve(&[4, 5], None).unwrap();
    assert_eq!(s.result_shape(), vec![3]);
    assert_eq!(s.dims[0], DimIndexer::List(vec![3, 0, 3]));
    // A scalar broadcasts against the points.
    let s = SelectionSpec::parse("2,[1,2,4]", SelectionMode::Coordinate).unwrap().resolve(&[4, 5], None).unwrap();
    assert_eq!(s.dims[0], DimIndexer::List(vec![2, 2, 2]));
    let e =
        SelectionSpec::parse("[1,2],[1,2,4]", SelectionMode::Coordinate).unwrap().resolve(&[4, 5], None).unwrap_err();
    assert!(e.to_string().contains("dimension 1: 3 indices, but an earlier dimension has 2"), "{e}");
    let e = SelectionSpec::parse("[1,2],:", SelectionMode::Coordinate).unwrap().resolve(&[4, 5], None).unwrap_err();
    assert!(e.to_string().contains("dimension 1: a coordinate selection takes a list"), "{e}");
}

#[test]
fn json_form_accepts_lists_objects_and_strings() {
    let j: SelectionJson = serde_json::from_value(serde_json::json!({
        "selection": [0, "2:10:2", {"start": -3, "step": -1}, [1, 5], null, "..."],
        "mode": "orthogonal"
    }))
    .unwrap();
    let s = j.to_spec().unwrap();
    assert_eq!(s.mode, SelectionMode::Orthogonal);
    assert_eq!(s.dims[2], DimSpec::Slice { start: Some(-3), stop: None, step: Some(-1) });
    assert_eq!(s.dims[3], DimSpec::List(vec![1, 5]));
    assert_eq!(s.dims[4], DimSpec::full());
    let j: SelectionJson = serde_json::from_value(serde_json::json!({"selection": {"t": 0, "x": "1:"}})).unwrap();
    assert_eq!(j.to_spec().unwrap().named.len(), 2);
    let j: SelectionJson = serde_json::from_value(serde_json::json!({"selection": "0,1"})).unwrap();
    assert_eq!(j.to_spec().unwrap().dims, vec![DimSpec::Index(0), DimSpec::Index(1)]);
    for (v, needle) in [
        (serde_json::json!({"selection": [true]}), "dimension 0: expected an index"),
        (serde_json::json!({"selection": [0, {"begin": 1}]}), "dimension 1: unknown slice member `begin`"),
        (serde_json::json!({"selection": [[1, "a"]]}), "dimension 0: list items must be integers"),
        (serde_json::json!({"selection": [{"step": 0}]}), "step must not be zero"),
        (serde_json::json!({"selection": 3}), "expected a list"),
    ] {
        let j: SelectionJson = serde_json::from_value(v).unwrap();
        let e = j.to_spec().unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn whole_array_and_huge_shapes_do_not_overflow() {
    let s = Selection::all(&[u64::MAX, u64::MAX]);
    assert_eq!(s.num_elements(), u64::MAX, "saturates");
    let d = resolve_slice(Some(i64::MIN), Some(i64::MAX), Some(i64::MAX), u64::MAX);
    assert_eq!(d.len(), 0, "CPython: len(range(2**64-1)[-2**63:2**63-1:2**63-1]) == 0");
    let d = resolve_slice(Some(0), None, Some(i64::MAX), u64::MAX);
    assert_eq!(d.len(), 3);
    assert_eq!(d.get(2), 2 * (i64::MAX as u64));
    let d = resolve_slice(None, None, Some(i64::MIN), 10);
    assert_eq!(idx(&d), vec![9]);
}

fn body(v: serde_json::Value) -> Result<SelectionSpec> {
    serde_json::from_value::<SelectionJson>(v).unwrap().into_spec()
}

#[test]
fn json_bodies_count_listed_indices_as_they_parse() {
    let n = usize::try_from(MAX_SELECTION_INDICES).unwrap();
    // Exactly the limit, over two lists: kept.
    let half: Vec<u32> = vec![1; n / 2];
    let s = body(serde_json::json!({"selection": [half, half]})).unwrap();
    assert_eq!(s.listed(), MAX_SELECTION_INDICES);
    // One more: refused as too large, naming the limit.
    let e = body(serde_json::json!({"selection": [half, half, [3]]})).unwrap_err();
    assert!(e.is_too_large() && e.0.contains("4194304"), "{e}");
    // Text lists inside the body count with the JSON lists, before they are built.
    let e =
        body(serde_json::json!({"selection": [half, format!("[{}]", vec!["0"; n / 2 + 1].join(","))]})).unwrap_err();
    assert!(e.is_too_large(), "{e}");
    let e = body(serde_json::json!({"selection": format!("[{}]", vec!["0"; n + 1].join(","))})).unwrap_err();
    assert!(e.is_too_large(), "{e}");
    let e = body(serde_json::json!({"selection": {"t": half, "x": half, "y": [1]}})).unwrap_err();
    assert!(e.is_too_large(), "{e}");
    // Malformed items are still selection errors naming the dimension, whatever follows them.
    let e = body(serde_json::json!({"selection": [0, [1, 2.5, "x", [3]]]})).unwrap_err();
    assert!(!e.is_too_large() && e.0 == "dimension 1: list items must be integers, got 2.5", "{e}");
    let e = body(serde_json::json!({"selection": {"lat": [1, {"a": 1}]}})).unwrap_err();
    assert_eq!(e.0, "dimension `lat`: list items must be integers, got an object");
    let e = body(serde_json::json!({"selection": [{"start": "1"}]})).unwrap_err();
    assert_eq!(e.0, "dimension 0: `start` must be an integer, got \"1\"");
    let e = body(serde_json::json!({"selection": [u64::MAX]})).unwrap_err();
    assert!(e.0.contains("dimension 0: expected an integer, got 18446744073709551615"), "{e}");
    let e = body(serde_json::json!({"selection": [[u64::MAX]]})).unwrap_err();
    assert!(e.0.contains("list items must be integers"), "{e}");
    // At most one entry per dimension of the largest array, and a `...`.
    assert!(body(serde_json::json!({"selection": vec![serde_json::Value::Null; 33]})).is_ok());
    let e = body(serde_json::json!({"selection": vec![serde_json::Value::Null; 34]})).unwrap_err();
    assert!(e.0.contains("at most 32 dimensions"), "{e}");
    let e = SelectionSpec::parse(&vec![":"; 34].join(","), SelectionMode::Basic).unwrap_err();
    assert!(e.0.contains("at most 32 dimensions"), "{e}");
    assert_eq!(SelectionSpec::parse(&vec![":"; 33].join(","), SelectionMode::Basic).unwrap().dims.len(), 33);
    // Null members and null slices are the whole dimension, as before.
    let s = body(serde_json::json!({"selection": [{"start": null, "step": 2}, null]})).unwrap();
    assert_eq!(s.dims, vec![DimSpec::Slice { start: None, stop: None, step: Some(2) }, DimSpec::full()]);
}

#[test]
fn coordinate_broadcasts_are_counted_before_they_are_built() {
    let points = usize::try_from(MAX_SELECTION_INDICES / 4).unwrap() + 1;
    let mut dims = vec![DimSpec::List(vec![0; points])];
    dims.extend([DimSpec::Index(0), DimSpec::Index(1), DimSpec::List(vec![1])]);
    let spec = SelectionSpec { dims, named: Vec::new(), mode: SelectionMode::Coordinate };
    let e = spec.resolve(&[4, 4, 4, 4], None).unwrap_err();
    assert!(e.is_too_large() && e.0.contains(&format!("{points} points in 4 dimensions")), "{e}");
    let mut dims = vec![DimSpec::List(vec![0; points - 1])];
    dims.extend([DimSpec::Index(0), DimSpec::Index(1), DimSpec::List(vec![1])]);
    let spec = SelectionSpec { dims, named: Vec::new(), mode: SelectionMode::Coordinate };
    let sel = spec.resolve_owned(&[4, 4, 4, 4], None).unwrap();
    assert_eq!(sel.result_shape(), vec![(points - 1) as u64]);
    assert_eq!(sel.dims[2], DimIndexer::List(vec![1; points - 1]));
}
