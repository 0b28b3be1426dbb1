//! A GGUF file's header read by the lab itself: metadata and tensor infos, every length checked
//! against the bytes the file has, every ggml type id accepted whether or not anything computes
//! it. candle's reader refuses a type it has no kernel for (an IQ file), and a file must be
//! priced before it is loaded, or when it is never loaded at all.

use crate::error::{LabError, Result};
use crate::model::gguf::types::GgmlType;
use candle_core::quantized::gguf_file::Value;
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// GGUF's default data alignment (`general.alignment` overrides it).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The most tensor data a header may describe (1 PiB, far above any checkpoint: the largest
/// published are a few TB). Bounding it here keeps every size derived from a tensor inside u64,
/// a dequantized copy's included (at most ~5 values a byte, 4 bytes a value).
const MAX_TENSOR_DATA: u128 = 1 << 50;
/// More dimensions than ggml has (GGML_MAX_DIMS = 4) mark a forged header.
const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this mark a forged header (metadata arrays are flat in practice).
const MAX_DEPTH: u32 = 2;
/// A metadata array of more items than this is passed over, not read into values (32 bytes an
/// item), unless it is a tokenizer's (up to a vocabulary's size): no other array the lab reads is
/// longer than a model's layer count.
const MAX_KEPT_ITEMS: u64 = 1 << 16;

#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml's order: the row length first (candle's shape is these reversed).
    pub ne: Vec<u64>,
    pub type_id: u32,
    /// Relative to the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn ggml_type(&self) -> Option<GgmlType> {
        GgmlType::from_id(self.type_id)
    }

    pub fn elems(&self) -> u128 {
        self.ne.iter().fold(1u128, |a, &d| a.saturating_mul(d as u128))
    }

    /// The shape as candle and config.json give it (rows first).
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().map(|&d| d as usize).collect()
    }

    /// Bytes of the tensor's data; None for an unknown type or a shape that leaves a block partial.
    pub fn bytes(&self) -> Option<u128> {
        self.ggml_type()?.bytes_of(self.elems())
    }

    /// `bytes()` of a tensor in a parsed header, where `data_layout` bounded it to 1 PiB.
    pub fn stored_bytes(&self) -> u64 {
        self.bytes().and_then(|b| u64::try_from(b).ok()).unwrap_or(0)
    }

    /// `elems()` of a tensor in a parsed header (at most a few values a byte of its 1 PiB).
    pub fn values(&self) -> u64 {
        u64::try_from(self.elems()).unwrap_or(u64::MAX)
    }

    pub fn type_name(&self) -> String {
        self.ggml_type().map(|t| t.name.to_string()).unwrap_or_else(|| format!("type {}", self.type_id))
    }
}

#[derive(Debug, Clone)]
pub struct Header {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: HashMap<String, Value>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    /// Metadata arrays passed over unread (`MAX_KEPT_ITEMS`): keys the lab never reads.
    pub skipped: Vec<String>,
    /// Each name's place in `tensors`.
    index: HashMap<String, usize>,
    /// Where the data section starts in the file.
    pub data_offset: u64,
    pub file_len: u64,
}

/// A reader that knows how many bytes are left, so no length read from the file can ask for more.
struct Bounded<R> {
    r: R,
    left: u64,
    /// A length or count asked for more than was left: a prefix of a file may hold it all.
    ran_out: bool,
}

impl<R: Read> Bounded<R> {
    fn bytes(&mut self, n: u64, what: &str) -> std::result::Result<Vec<u8>, String> {
        if n > self.left {
            self.ran_out = true;
            return Err(format!("{what} needs {n} bytes, the file has {} left", self.left));
        }
        let mut buf = vec![0u8; n as usize];
        self.r.read_exact(&mut buf).map_err(|e| e.to_string())?;
        self.left -= n;
        Ok(buf)
    }
    fn array<const N: usize>(&mut self, what: &str) -> std::result::Result<[u8; N], String> {
        let v = self.bytes(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&v);
        Ok(a)
    }
    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn string(&mut self, what: &str) -> std::result::Result<String, String> {
        let n = self.u64(what)?;
        String::from_utf8(self.bytes(n, what)?).map_err(|_| format!("{what} is not UTF-8"))
    }
    /// Passes over `n` bytes without keeping them.
    fn skip(&mut self, n: u64, what: &str) -> std::result::Result<(), String> {
        if n > self.left {
            self.ran_out = true;
            return Err(format!("{what} needs {n} bytes, the file has {} left", self.left));
        }
        let got = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink()).map_err(|e| e.to_string())?;
        if got != n {
            self.ran_out = true;
            return Err(format!("{what} needs {n} bytes, the file ended after {got}"));
        }
        self.left -= n;
        Ok(())
    }
    /// Counts of items of at least `min` bytes each cannot exceed what is left.
    fn count(&mut self, min: u64, what: &str) -> std::result::Result<u64, String> {
        let n = self.u64(what)?;
        if n.saturating_mul(min) > self.left {
            self.ran_out = true;
            return Err(format!("{what} = {n} cannot fit in the {} bytes left", self.left));
        }
        Ok(n)
    }

    fn items(&mut self, inner: u32, n: u64, depth: u32, key: &str) -> std::result::Result<Value, String> {
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(self.value(inner, depth + 1, key)?);
        }
        Ok(Value::Array(v))
    }

    /// A top-level metadata array: read when the lab may use it (`MAX_KEPT_ITEMS`), else passed
    /// over item by item (None), so a header of a few hundred MB costs what it keeps.
    fn top_array(&mut self, key: &str) -> std::result::Result<Option<Value>, String> {
        let inner = self.u32(key)?;
        let size = item_bytes(inner, key)?;
        let n = self.count(size, key)?;
        let keep = if key.starts_with("tokenizer.") { crate::limits::MAX_VOCAB as u64 } else { MAX_KEPT_ITEMS };
        if n <= keep {
            return self.items(inner, n, 0, key).map(Some);
        }
        match inner {
            8 => {
                for _ in 0..n {
                    let len = self.u64(key)?;
                    self.skip(len, key)?;
                }
            }
            9 => return Err(format!("{key}: an array of {n} arrays")),
            _ => self.skip(n * size, key)?,
        }
        Ok(None)
    }

    fn value(&mut self, ty: u32, depth: u32, key: &str) -> std::result::Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(key)?[0]),
            1 => Value::I8(self.array::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => Value::Bool(self.array::<1>(key)?[0] != 0),
            8 => Value::String(self.string(key)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(format!("{key}: arrays nested deeper than {MAX_DEPTH}"));
                }
                let inner = self.u32(key)?;
                let n = self.count(item_bytes(inner, key)?, key)?;
                self.items(inner, n, depth, key)?
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            t => return Err(format!("{key}: unknown value type {t}")),
        })
    }
}

/// The bytes one item of an array of `inner` values takes at least (a string: its length).
fn item_bytes(inner: u32, key: &str) -> std::result::Result<u64, String> {
    Ok(match inner {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        t => return Err(format!("{key}: unknown value type {t}")),
    })
}

/// ggml's own rule for the data section (gguf.cpp, `gguf_init_from_file_impl`): each tensor
/// starts at a multiple of the alignment, right after the one before it padded to the alignment,
/// in header order. A file that breaks it is refused as ggml refuses it, not read at its offsets.
fn data_layout(tensors: &[TensorInfo], alignment: u64) -> std::result::Result<(), String> {
    let mut expected: u128 = 0;
    for t in tensors {
        let name = t.name.escape_debug();
        if t.offset % alignment != 0 {
            return Err(format!(
                "tensor {name} starts at offset {}, not a multiple of the alignment {alignment}",
                t.offset
            ));
        }
        if t.offset as u128 != expected {
            return Err(format!("tensor {name} starts at offset {}, where ggml expects {expected} (each tensor right after the one before it)", t.offset));
        }
        let bytes = match (t.ggml_type(), t.bytes()) {
            (_, Some(b)) => b,
            (None, None) => {
                return Err(format!("tensor {name} has type id {}, a ggml type the lab does not read", t.type_id))
            }
            (Some(ty), None) if t.elems() % ty.block as u128 != 0 => {
                return Err(format!("tensor {name}: {} elements do not fill whole {} blocks", t.elems(), ty.name))
            }
            (Some(_), None) => {
                return Err(format!("tensor {name}: its shape {:?} holds more bytes than the lab can count", t.ne))
            }
        };
        expected = expected.saturating_add(bytes.div_ceil(alignment as u128) * alignment as u128);
        if expected > MAX_TENSOR_DATA {
            return Err(format!(
                "tensor {name}: the tensors' data runs past 1 PiB ({expected} bytes with this one's {:?} values)",
                t.ne
            ));
        }
    }
    Ok(())
}

impl Header {
    pub fn read(path: &Path) -> Result<Self> {
        // A regular file only: a FIFO would block the open, a device would read forever.
        let (file, file_len) = crate::paths::open_regular(path, u64::MAX, true)?;
        Self::parse(BufReader::new(file), file_len, path)
            .map_err(|why| LabError::input(format!("{} is not a readable GGUF file ({why})", path.display())))
    }

    /// The header from `prefix`, the first bytes of a file of `file_len` bytes (a Range request's):
    /// None when it runs past them (fetch more), an error for a file that is not GGUF.
    pub fn from_prefix(prefix: &[u8], file_len: u64, path: &Path) -> Result<Option<Self>> {
        let mut r = Bounded { r: prefix, left: prefix.len() as u64, ran_out: false };
        match Self::parse_bounded(&mut r, path) {
            Ok(h) => Ok(Some(Self { file_len: file_len.max(h.data_offset), ..h })),
            Err(_) if r.ran_out && (prefix.len() as u64) < file_len => Ok(None),
            Err(why) => Err(LabError::input(format!("{} is not a readable GGUF file ({why})", path.display()))),
        }
    }

    fn parse(r: impl Read, file_len: u64, path: &Path) -> std::result::Result<Self, String> {
        Self::parse_bounded(&mut Bounded { r, left: file_len, ran_out: false }, path)
    }

    fn parse_bounded<R: Read>(r: &mut Bounded<R>, path: &Path) -> std::result::Result<Self, String> {
        let file_len = r.left;
        if &r.array::<4>("the magic")? != b"GGUF" {
            return Err("no GGUF magic".into());
        }
        let version = r.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version}; the lab reads versions 2 and 3"));
        }
        let n_tensors = r.count(8 + 4 + 4 + 8, "the tensor count")?;
        let n_kv = r.count(8 + 4 + 1, "the metadata count")?;
        let mut metadata = HashMap::new();
        let mut skipped = Vec::new();
        for _ in 0..n_kv {
            let key = r.string("a metadata key")?;
            let ty = r.u32(&key)?;
            let v = if ty == 9 { r.top_array(&key)? } else { Some(r.value(ty, 0, &key)?) };
            // ggml refuses a key given twice (gguf.cpp: "duplicate key").
            if metadata.contains_key(&key) || skipped.contains(&key) {
                return Err(format!("metadata key {} is given twice", key.escape_debug()));
            }
            match v {
                Some(v) => {
                    metadata.insert(key, v);
                }
                None => skipped.push(key),
            }
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = r.string("a tensor name")?;
            let dims = r.u32(&name)?;
            if dims == 0 || dims > MAX_DIMS {
                return Err(format!("tensor {name} has {dims} dimensions"));
            }
            let ne = (0..dims).map(|_| r.u64(&name)).collect::<std::result::Result<Vec<_>, _>>()?;
            let type_id = r.u32(&name)?;
            let offset = r.u64(&name)?;
            tensors.push(TensorInfo { name, ne, type_id, offset });
        }
        let alignment = match metadata.get("general.alignment") {
            Some(Value::U32(a)) if *a > 0 && a.is_power_of_two() => *a as u64,
            Some(v) => return Err(format!("general.alignment = {v:?} is not a power of two")),
            None => DEFAULT_ALIGNMENT,
        };
        let header_end = file_len - r.left;
        let data_offset = header_end.div_ceil(alignment) * alignment;
        data_layout(&tensors, alignment)?;
        // ggml refuses a name given twice (gguf.cpp: "duplicate tensor name").
        let mut index = HashMap::new();
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(format!("tensor {} is named twice", t.name.escape_debug()));
            }
        }
        Ok(Self { path: path.to_path_buf(), version, metadata, tensors, skipped, index, data_offset, file_len })
    }

    /// The tensors of another part of a split file (`-00002-of-00003.gguf`) added to this one's,
    /// for pricing: their offsets are each part's own.
    pub fn absorb(&mut self, other: Header) -> Result<()> {
        for t in other.tensors {
            if self.index.insert(t.name.clone(), self.tensors.len()).is_some() {
                return Err(LabError::input(format!(
                    "{}: tensor {} is in two parts of the split file",
                    other.path.display(),
                    t.name.escape_debug()
                )));
            }
            self.tensors.push(t);
        }
        Ok(())
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes the file must hold: the data section's start plus the furthest tensor's end
    /// (saturating: a forged shape asks for more than any file holds).
    pub fn needs(&self) -> u64 {
        let end = |t: &TensorInfo| (t.offset as u128).saturating_add(t.bytes().unwrap_or(u128::MAX));
        let furthest = self.tensors.iter().map(end).max().unwrap_or(0);
        u64::try_from((self.data_offset as u128).saturating_add(furthest)).unwrap_or(u64::MAX)
    }

    /// `LabError::Truncated` when the file is shorter than its header says.
    pub fn truncated(&self) -> Option<LabError> {
        let need = self.needs();
        (self.file_len < need).then(|| LabError::Truncated {
            path: self.path.display().to_string(),
            have: self.file_len,
            need,
        })
    }

    /// Every tensor's type is in ggml's table and fills whole blocks.
    pub fn check_types(&self) -> Result<()> {
        for t in &self.tensors {
            let ty = t.ggml_type().ok_or_else(|| {
                LabError::input(format!(
                    "{}: tensor {} has ggml type id {}, which ggml does not define",
                    self.path.display(),
                    t.name,
                    t.type_id
                ))
            })?;
            if ty.bytes_of(t.elems()).is_none() {
                return Err(LabError::input(format!(
                    "{}: tensor {} has {} values, not whole {} blocks of {}",
                    self.path.display(),
                    t.name,
                    t.elems(),
                    ty.name,
                    ty.block
                )));
            }
        }
        Ok(())
    }

    /// The tensors' data bytes, each by its own type: what the weights take on a device when the
    /// file is loaded as it is stored.
    pub fn tensor_bytes(&self) -> Result<u64> {
        self.check_types()?;
        let total = self.tensors.iter().map(|t| t.bytes().unwrap_or(0)).sum::<u128>();
        u64::try_from(total)
            .map_err(|_| LabError::input(format!("{}: the tensors' sizes add up past 2^64 bytes", self.path.display())))
    }

    /// Tensor count and bytes per ggml type, largest first.
    pub fn bytes_by_type(&self) -> Vec<(String, usize, u64)> {
        super::types::tally(self.tensors.iter().map(|t| (t.type_name(), t.stored_bytes())))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key)?.to_string().ok().map(|s| s.as_str())
    }

    /// An unsigned integer of any width.
    pub fn uint(&self, key: &str) -> Option<u64> {
        match self.get(key)? {
            Value::U8(v) => Some(*v as u64),
            Value::U16(v) => Some(*v as u64),
            Value::U32(v) => Some(*v as u64),
            Value::U64(v) => Some(*v),
            Value::I8(v) => u64::try_from(*v).ok(),
            Value::I16(v) => u64::try_from(*v).ok(),
            Value::I32(v) => u64::try_from(*v).ok(),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    pub fn float(&self, key: &str) -> Option<f64> {
        match self.get(key)? {
            Value::F32(v) => Some(*v as f64),
            Value::F64(v) => Some(*v),
            _ => self.uint(key).map(|v| v as f64),
        }
    }

    /// An array of strings (tokens, merges); None when absent or of another kind.
    pub fn strings(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?.to_vec().ok()?.iter().map(|v| v.to_string().ok().map(|s| s.as_str())).collect()
    }

    /// An array of integers (token types).
    pub fn ints(&self, key: &str) -> Option<Vec<i64>> {
        self.get(key)?
            .to_vec()
            .ok()?
            .iter()
            .map(|v| match v {
                Value::I32(x) => Some(*x as i64),
                Value::U32(x) => Some(*x as i64),
                Value::I8(x) => Some(*x as i64),
                Value::U8(x) => Some(*x as i64),
                Value::I64(x) => Some(*x),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 header of no tensors and one U8 array of `n` items under `key`.
    fn with_array(key: &str, n: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend((key.len() as u64).to_le_bytes());
        b.extend(key.as_bytes());
        b.extend(9u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(n.to_le_bytes());
        b.extend(std::iter::repeat_n(7u8, n as usize));
        b
    }

    #[test]
    fn long_arrays_the_lab_never_reads_are_passed_over() {
        // 4 Mi items would be 128 MiB of values: passed over, named, the layout still right.
        let big = with_array("general.junk", 4 << 20);
        let h = Header::from_prefix(&big, big.len() as u64, Path::new("x.gguf")).unwrap().unwrap();
        assert!(h.metadata.is_empty());
        assert_eq!(h.skipped, ["general.junk"]);
        assert_eq!(h.data_offset, (big.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT);
        let small = with_array("general.small", 100);
        let h = Header::from_prefix(&small, small.len() as u64, Path::new("x.gguf")).unwrap().unwrap();
        assert!(matches!(h.metadata.get("general.small"), Some(Value::Array(v)) if v.len() == 100));
        assert!(h.skipped.is_empty());
        // A tokenizer's array is read up to a vocabulary's size.
        let tokens = with_array("tokenizer.ggml.token_type", 1 << 17);
        let h = Header::from_prefix(&tokens, tokens.len() as u64, Path::new("x.gguf")).unwrap().unwrap();
        assert!(h.metadata.contains_key("tokenizer.ggml.token_type"));
    }
}
