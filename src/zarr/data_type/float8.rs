//! TensorStore's 8-bit float formats (from ml_dtypes): their layouts and
//! conversions to and from `f64`, used for fill values and JSON output.
//!
//! Spec: TensorStore's `zarr` / `zarr3` data type tables (`float8_e4m3fn`,
//! `float8_e4m3fnuz`, `float8_e4m3b11fnuz`, `float8_e5m2`,
//! `float8_e5m2fnuz`), whose bit layouts are ml_dtypes' (and, for the `fn` /
//! non-`fnuz` pair, OCP's 8-bit floating point specification).

/// TensorStore's (and ml_dtypes') 8-bit float formats, named as its `zarr`
/// driver writes them in a v2 `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Float8Kind {
    /// 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN `S.1111.111`.
    E4M3Fn,
    /// 4 exponent bits (bias 8), no infinities, no negative zero, NaN `0x80`.
    E4M3Fnuz,
    /// 4 exponent bits (bias 11), no infinities, no negative zero, NaN `0x80`.
    E4M3B11Fnuz,
    /// 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like infinities and NaNs.
    E5M2,
    /// 5 exponent bits (bias 16), no infinities, no negative zero, NaN `0x80`.
    E5M2Fnuz,
}

impl Float8Kind {
    /// Every variant.
    pub const ALL: [Self; 5] = [Self::E4M3Fn, Self::E4M3Fnuz, Self::E4M3B11Fnuz, Self::E5M2, Self::E5M2Fnuz];

    /// The name (`"float8_e4m3fn"`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::E4M3Fn => "float8_e4m3fn",
            Self::E4M3Fnuz => "float8_e4m3fnuz",
            Self::E4M3B11Fnuz => "float8_e4m3b11fnuz",
            Self::E5M2 => "float8_e5m2",
            Self::E5M2Fnuz => "float8_e5m2fnuz",
        }
    }

    /// The variant of a name.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// (exponent bits, mantissa bits, exponent bias).
    fn layout(self) -> (u32, u32, i32) {
        match self {
            Self::E4M3Fn => (4, 3, 7),
            Self::E4M3Fnuz => (4, 3, 8),
            Self::E4M3B11Fnuz => (4, 3, 11),
            Self::E5M2 => (5, 2, 15),
            Self::E5M2Fnuz => (5, 2, 16),
        }
    }

    /// "fnuz" formats: one NaN (`0x80`), no negative zero, no infinities.
    fn is_fnuz(self) -> bool {
        matches!(self, Self::E4M3Fnuz | Self::E4M3B11Fnuz | Self::E5M2Fnuz)
    }

    /// The canonical NaN (what ml_dtypes and TensorStore produce).
    #[must_use]
    pub fn nan(self) -> u8 {
        match self {
            Self::E4M3Fn => 0x7f,
            Self::E5M2 => 0x7e,
            _ => 0x80,
        }
    }

    /// The value of one stored byte.
    #[must_use]
    pub fn to_f64(self, byte: u8) -> f64 {
        let (ebits, mbits, bias) = self.layout();
        let negative = byte & 0x80 != 0;
        let e = i32::from(byte >> mbits) & ((1 << ebits) - 1);
        let m = i32::from(byte) & ((1 << mbits) - 1);
        let emax = (1 << ebits) - 1;
        if self.is_fnuz() && byte == 0x80 {
            return f64::NAN;
        }
        if self == Self::E4M3Fn && e == emax && m == (1 << mbits) - 1 {
            return f64::NAN;
        }
        if self == Self::E5M2 && e == emax {
            return if m != 0 {
                f64::NAN
            } else if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
        }
        let scale = |x: i32| 2f64.powi(x);
        let magnitude = if e == 0 {
            f64::from(m) * scale(1 - bias - i32::try_from(mbits).unwrap_or(0))
        } else {
            (1.0 + f64::from(m) / scale(i32::try_from(mbits).unwrap_or(0))) * scale(e - bias)
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The largest finite value.
    #[must_use]
    pub fn max(self) -> f64 {
        (0u8..0x80).map(|b| self.to_f64(b)).filter(|v| v.is_finite()).fold(0.0, f64::max)
    }

    /// The byte nearest to `value` (ties to an even mantissa, as IEEE
    /// rounding does), or `None` when the format cannot hold it: an
    /// infinity in a format without infinities, or a finite value beyond the
    /// largest finite one.
    #[must_use]
    pub fn from_f64(self, value: f64) -> Option<u8> {
        if value.is_nan() {
            return Some(self.nan());
        }
        if value.is_infinite() {
            return (self == Self::E5M2).then_some(if value > 0.0 { 0x7c } else { 0xfc });
        }
        if value.abs() > self.max() {
            return None;
        }
        let mut best: Option<(u8, f64)> = None;
        for byte in 0u8..=255 {
            let v = self.to_f64(byte);
            if !v.is_finite() {
                continue;
            }
            let d = (v - value).abs();
            let better = match best {
                None => true,
                Some((b, bd)) => d < bd || (d == bd && byte & 1 == 0 && b & 1 == 1),
            };
            if better {
                best = Some((byte, d));
            }
        }
        let byte = best.map(|(b, _)| b)?;
        // Keep the sign of zero where the format has a negative zero.
        if byte == 0 && value.is_sign_negative() && !self.is_fnuz() {
            return Some(0x80);
        }
        Some(byte)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference bytes from ml_dtypes 0.6 (what TensorStore uses):
    /// `np.array(xs).astype(ml_dtypes.<kind>).view(np.uint8)`.
    #[test]
    fn float8_matches_ml_dtypes() {
        let xs = [0.3, 1e-9, -0.0, 0.5 + 2f64.powi(-5), -3.0, 2.0];
        for (kind, want, max) in [
            (Float8Kind::E4M3Fn, [0x2a, 0x00, 0x80, 0x30, 0xc4, 0x40], 448.0),
            (Float8Kind::E4M3Fnuz, [0x32, 0x00, 0x00, 0x38, 0xcc, 0x48], 240.0),
            (Float8Kind::E4M3B11Fnuz, [0x4a, 0x00, 0x00, 0x50, 0xe4, 0x60], 30.0),
            (Float8Kind::E5M2, [0x35, 0x00, 0x80, 0x38, 0xc2, 0x40], 57344.0),
            (Float8Kind::E5M2Fnuz, [0x39, 0x00, 0x00, 0x3c, 0xc6, 0x44], 57344.0),
        ] {
            let got: Vec<u8> = xs.iter().map(|x| kind.from_f64(*x).unwrap()).collect();
            assert_eq!(got, want, "{kind:?}");
            assert_eq!(kind.max(), max, "{kind:?}");
            assert!(kind.to_f64(kind.nan()).is_nan());
            assert_eq!(kind.from_f64(f64::NAN), Some(kind.nan()));
            assert_eq!(kind.from_f64(max * 2.0), None, "{kind:?}: out of range");
            // Every finite byte is its own nearest value.
            for b in 0u8..=255 {
                let v = kind.to_f64(b);
                if v.is_finite() && !(v == 0.0 && b != 0 && b != 0x80) {
                    assert_eq!(kind.from_f64(v), Some(b), "{kind:?} {b:#x}");
                }
            }
            assert_eq!(Float8Kind::parse(kind.name()), Some(kind));
        }
        let nans = |k: Float8Kind| (0u8..=255).filter(|b| k.to_f64(*b).is_nan()).count();
        assert_eq!(Float8Kind::ALL.map(nans), [2, 1, 1, 6, 1], "NaN encodings per kind, as ml_dtypes counts them");
        assert_eq!(Float8Kind::E5M2.from_f64(f64::NEG_INFINITY), Some(0xfc));
        assert_eq!(Float8Kind::E4M3Fn.from_f64(f64::INFINITY), None);
    }
}
