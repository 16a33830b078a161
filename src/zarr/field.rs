//! One field of a structured (record) array, read or written as an array of
//! its own, as TensorStore's `zarr` driver does: the field's element type,
//! with the field's subarray shape appended to the array's dimensions.
//!
//! Spec: Zarr v2 §"Data type encoding" (structured types: `[name, dtype]`
//! and `[name, dtype, shape]` fields); TensorStore `driver/zarr` `field`
//! ("structured data types are represented as scalar arrays with additional
//! dimensions"). Nested records are addressed by their dotted leaf names
//! (`"b.x"`), which TensorStore does not open at all.
//!
//! Records are in the engine's in-memory layout (every field little-endian,
//! see [`crate::zarr::data_type`]), so a field's values are plain byte copies.

use super::data_type::DataType;

/// Why a field cannot be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// The array's data type has no fields.
    #[error("the data type {0} is not structured; it has no fields")]
    NotStructured(String),
    /// No field has this name.
    #[error("no field \"{name}\"; the fields are {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The field names there are, comma-separated.
        known: String,
    },
    /// Record or value bytes of the wrong length.
    #[error("{0}")]
    Length(String),
}

/// One field of a structured type, ready to copy out of (or into) records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldView {
    /// The field's element type.
    pub data_type: DataType,
    /// The field's subarray shape (empty for a scalar field).
    pub subarray: Vec<u64>,
    offset: usize,
    /// Bytes of the field in one record (element size times subarray size).
    len: usize,
    record_size: usize,
}

impl FieldView {
    /// The field `name` of the structured type `dt`.
    ///
    /// # Errors
    /// A type that is not structured, or an unknown name (nested records are
    /// named by their dotted leaves, `"b.x"`).
    pub fn of(dt: &DataType, name: &str) -> Result<Self, FieldError> {
        let DataType::Structured { size, fields } = dt else {
            return Err(FieldError::NotStructured(format!("{dt:?}")));
        };
        let field = fields.iter().find(|f| f.name == name).ok_or_else(|| FieldError::Unknown {
            name: name.to_owned(),
            known: fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
        })?;
        let count = field.subarray.iter().try_fold(1usize, |n, d| n.checked_mul(usize::try_from(*d).ok()?));
        let len = count
            .and_then(|c| c.checked_mul(field.data_type.size()?))
            .filter(|len| field.offset.checked_add(*len).is_some_and(|end| end <= *size))
            .ok_or_else(|| FieldError::Length(format!("field \"{name}\" does not fit its {size}-byte record")))?;
        Ok(Self {
            data_type: (*field.data_type).clone(),
            subarray: field.subarray.clone(),
            offset: field.offset,
            len,
            record_size: *size,
        })
    }

    /// The shape of the field read as an array: `array_shape` with the
    /// subarray shape appended.
    #[must_use]
    pub fn shape(&self, array_shape: &[u64]) -> Vec<u64> {
        array_shape.iter().chain(&self.subarray).copied().collect()
    }

    /// The field's values (C order, subarray dimensions innermost) from
    /// packed records.
    ///
    /// # Errors
    /// `records` is not a whole number of records.
    pub fn extract(&self, records: &[u8]) -> Result<Vec<u8>, FieldError> {
        self.check_records(records.len())?;
        let mut out = Vec::with_capacity(records.len() / self.record_size * self.len);
        for record in records.chunks_exact(self.record_size) {
            out.extend_from_slice(&record[self.offset..self.offset + self.len]);
        }
        Ok(out)
    }

    /// Writes the field's `values` into `records`, leaving the other fields
    /// as they are.
    ///
    /// # Errors
    /// `records` is not a whole number of records, or `values` does not hold
    /// one field value per record.
    pub fn insert(&self, records: &mut [u8], values: &[u8]) -> Result<(), FieldError> {
        self.check_records(records.len())?;
        let n = records.len() / self.record_size;
        if values.len() != n * self.len {
            return Err(FieldError::Length(format!(
                "expected {} bytes of field values for {n} records, got {}",
                n * self.len,
                values.len()
            )));
        }
        for (record, value) in records.chunks_exact_mut(self.record_size).zip(values.chunks_exact(self.len)) {
            record[self.offset..self.offset + self.len].copy_from_slice(value);
        }
        Ok(())
    }

    fn check_records(&self, len: usize) -> Result<(), FieldError> {
        if self.record_size == 0 || len % self.record_size != 0 {
            return Err(FieldError::Length(format!(
                "{len} bytes are not a whole number of {}-byte records",
                self.record_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::data_type::Field;

    /// np.dtype([('a', '<u2'), ('c', '<i2', (2,))]) flattened, plus a nested leaf.
    fn record_type() -> DataType {
        let field = Field::little;
        DataType::Structured {
            size: 7,
            fields: vec![
                field("a", 0, DataType::UInt16, vec![]),
                field("c", 2, DataType::Int16, vec![2]),
                field("b.y", 6, DataType::UInt8, vec![]),
            ],
        }
    }

    #[test]
    fn extract_and_insert() {
        let dt = record_type();
        let records: Vec<u8> = vec![1, 0, 2, 0, 3, 0, 9, 4, 0, 5, 0, 6, 0, 8];
        let c = FieldView::of(&dt, "c").unwrap();
        assert_eq!(c.shape(&[2]), vec![2, 2]);
        assert_eq!(c.data_type, DataType::Int16);
        assert_eq!(c.extract(&records).unwrap(), vec![2, 0, 3, 0, 5, 0, 6, 0]);
        let y = FieldView::of(&dt, "b.y").unwrap();
        assert_eq!(y.extract(&records).unwrap(), vec![9, 8]);
        let mut changed = records.clone();
        y.insert(&mut changed, &[1, 2]).unwrap();
        assert_eq!(changed, vec![1, 0, 2, 0, 3, 0, 1, 4, 0, 5, 0, 6, 0, 2]);
    }

    #[test]
    fn errors_name_the_problem() {
        let dt = record_type();
        let e = FieldView::of(&dt, "b").unwrap_err();
        assert_eq!(e.to_string(), "no field \"b\"; the fields are a, c, b.y");
        assert!(matches!(FieldView::of(&DataType::Int8, "a"), Err(FieldError::NotStructured(_))));
        let a = FieldView::of(&dt, "a").unwrap();
        assert!(matches!(a.extract(&[0; 8]), Err(FieldError::Length(_))));
        let mut records = vec![0; 14];
        assert!(matches!(a.insert(&mut records, &[0; 3]), Err(FieldError::Length(_))));
        // A field that claims more bytes than its record holds is an error, not a panic.
        let DataType::Structured { fields, .. } = dt else { unreachable!() };
        let bad = DataType::Structured { size: 3, fields };
        assert!(matches!(FieldView::of(&bad, "c"), Err(FieldError::Length(_))));
    }
}
