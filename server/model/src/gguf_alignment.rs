//! The check of a GGUF header's `general.alignment` before candle reads the header: candle
//! divides by it without looking (a 0 panics, "attempt to divide by zero").
//!
//! Walks the metadata entries the way the format lays them out, skipping every value it does
//! not need, and stops at the key. Whatever else is wrong with the header (a bad magic, a
//! truncation) is left to candle's reader, which reports it.

use anyhow::{bail, Result};
use std::io::{BufReader, Read, Seek, SeekFrom};

const KEY: &str = "general.alignment";

/// Fails when `general.alignment` is an integer that is not a power of two (0 included);
/// leaves `reader` at its start. Values are skipped within the buffer (the vocabulary's
/// strings are most of a header): under a millisecond for the default model's header, which
/// candle reads in about 40 ms (measured).
pub(crate) fn check<R: Read + Seek>(reader: &mut BufReader<R>) -> Result<()> {
    let alignment = find(reader).ok().flatten();
    reader.seek(SeekFrom::Start(0))?;
    match alignment {
        Some(alignment) if !alignment.is_power_of_two() => {
            bail!("not a valid GGUF file (truncated or corrupt?): {KEY} is {alignment}, not a power of two")
        }
        _ => Ok(()),
    }
}

/// The GGUF types whose values have a fixed size, by type id, and that size.
fn fixed_size(value_type: u32) -> Option<i64> {
    Some(match value_type {
        0 | 1 | 7 => 1, // u8, i8, bool
        2 | 3 => 2,     // u16, i16
        4..=6 => 4,     // u32, i32, f32
        10..=12 => 8,   // u64, i64, f64
        _ => return None,
    })
}

const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// Reads lengths as the file's version writes them: 32 bits in version 1, 64 after.
struct Header<'r, R> {
    reader: &'r mut BufReader<R>,
    wide: bool,
}

impl<R: Read + Seek> Header<'_, R> {
    fn u32(&mut self) -> std::io::Result<u32> {
        let mut bytes = [0; 4];
        self.reader.read_exact(&mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn length(&mut self) -> std::io::Result<u64> {
        if !self.wide {
            return self.u32().map(u64::from);
        }
        let mut bytes = [0; 8];
        self.reader.read_exact(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn skip(&mut self, bytes: u64) -> std::io::Result<()> {
        let bytes = i64::try_from(bytes).map_err(|_| std::io::ErrorKind::InvalidData)?;
        self.reader.seek_relative(bytes)
    }

    fn string(&mut self) -> std::io::Result<Vec<u8>> {
        let len = self.length()?;
        let mut bytes = Vec::new();
        self.reader.by_ref().take(len).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Skips one value of `value_type`.
    fn skip_value(&mut self, value_type: u32) -> std::io::Result<()> {
        match (value_type, fixed_size(value_type)) {
            (_, Some(size)) => self.skip(size as u64),
            (STRING, None) => {
                let len = self.length()?;
                self.skip(len)
            }
            (ARRAY, None) => {
                let item_type = self.u32()?;
                let count = self.length()?;
                match fixed_size(item_type) {
                    Some(size) => self.skip(count.saturating_mul(size as u64)),
                    None => (0..count).try_for_each(|_| self.skip_value(item_type)),
                }
            }
            _ => Err(std::io::ErrorKind::InvalidData.into()),
        }
    }

    /// The integer value of `value_type` next in the file, if it is one of the integer types
    /// candle reads an alignment from (u8, u16, u32 and their signed kinds).
    fn integer(&mut self, value_type: u32) -> std::io::Result<Option<i64>> {
        let Some(size) = fixed_size(value_type).filter(|_| value_type <= 5) else {
            self.skip_value(value_type)?;
            return Ok(None);
        };
        let mut bytes = [0; 8];
        self.reader.read_exact(&mut bytes[..size as usize])?;
        let unsigned = u64::from_le_bytes(bytes);
        let bits = 8 * size as u32;
        Ok(Some(match value_type % 2 {
            0 => unsigned as i64,
            _ => ((unsigned << (64 - bits)) as i64) >> (64 - bits),
        }))
    }
}

/// The value of `general.alignment` as candle would take it (`None`: absent, or of a type or
/// sign candle ignores for its default).
fn find<R: Read + Seek>(reader: &mut BufReader<R>) -> std::io::Result<Option<u64>> {
    reader.seek(SeekFrom::Start(0))?;
    let mut magic = [0; 4];
    reader.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        return Ok(None);
    }
    let mut header = Header { reader, wide: true };
    header.wide = header.u32()? >= 2;
    let _tensors = header.length()?;
    let entries = header.length()?;
    for _ in 0..entries {
        let key = header.string()?;
        let value_type = header.u32()?;
        if key == KEY.as_bytes() {
            return Ok(header.integer(value_type)?.and_then(|v| u64::try_from(v).ok()));
        }
        header.skip_value(value_type)?;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::{self, Value};
    use std::io::Cursor;

    fn header(metadata: &[(&str, Value)]) -> BufReader<Cursor<Vec<u8>>> {
        let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        let mut bytes = Cursor::new(Vec::new());
        gguf_file::write(&mut bytes, &md, &[]).unwrap();
        BufReader::new(bytes)
    }

    #[test]
    fn the_alignment_is_found_past_values_of_every_kind() {
        let before = [
            ("a", Value::String("text".into())),
            ("b", Value::Array(vec![Value::String("x".into()), Value::String("yz".into())])),
            ("c", Value::Array(vec![Value::F32(1.0), Value::F32(2.0)])),
            ("d", Value::U64(7)),
            ("e", Value::Bool(true)),
        ];
        for (alignment, found) in [(Value::U32(64), Some(64)), (Value::I8(-1), None), (Value::U64(0), None)] {
            let mut metadata = before.to_vec();
            metadata.push((KEY, alignment.clone()));
            metadata.push(("f", Value::I16(-2)));
            assert_eq!(find(&mut header(&metadata)).unwrap(), found, "{alignment:?}");
        }
        assert_eq!(find(&mut header(&before)).unwrap(), None);
    }

    #[test]
    fn an_alignment_of_zero_or_not_a_power_of_two_is_refused() {
        for (alignment, refused) in [(0, true), (7, true), (32, false)] {
            let mut file = header(&[("x", Value::U8(1)), (KEY, Value::U32(alignment))]);
            let result = check(&mut file);
            assert_eq!(result.is_err(), refused, "{alignment}: {result:?}");
            if let Err(error) = result {
                assert!(error.to_string().contains(&format!("{KEY} is {alignment}, not a power of two")), "{error}");
            }
            assert_eq!(file.stream_position().unwrap(), 0);
        }
    }
}
