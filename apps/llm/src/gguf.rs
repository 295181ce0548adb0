//! GGUF (versions 2 and 3), read over a memory-mapped file: the metadata, the tensor table,
//! and each tensor's bytes where they lie, never copied. Every read is bounds-checked: a file
//! that is not GGUF, is cut short or holds a tensor type mpr-llm does not read is an error
//! naming what is wrong (the tensor and its type, the byte where the file ends).

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Uint(v) => Some(v as f64),
            Value::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// The element types mpr-llm multiplies by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl DType {
    fn from_ggml(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            8 => DType::Q8_0,
            30 => DType::BF16,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
        }
    }

    /// Elements per block and bytes per block.
    pub(crate) fn block(self) -> (usize, usize) {
        match self {
            DType::F32 => (1, 4),
            DType::F16 | DType::BF16 => (1, 2),
            DType::Q8_0 => (32, 34),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
        }
    }
}

/// ggml's name of a type id, for the error about a type mpr-llm does not read.
fn ggml_type_name(id: u32) -> String {
    let names = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
        "I32", "I64", "F64", "IQ1_M", "BF16",
    ];
    names.get(id as usize).map_or_else(|| format!("type {id}"), |n| n.to_string())
}

/// One tensor of the file.
#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    /// Dimensions, fastest first (GGUF's ne: a matrix is dims[1] rows of dims[0]).
    pub(crate) dims: Vec<usize>,
    pub(crate) dtype: DType,
    /// Where its bytes start in the file, and how many.
    start: usize,
    len: usize,
}

/// An open GGUF file.
#[derive(Debug)]
pub(crate) struct Gguf {
    file: File,
    pub(crate) meta: HashMap<String, Value>,
    pub(crate) tensors: HashMap<String, TensorInfo>,
}

/// A bounds-checked cursor over the file's bytes.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: the file ends at byte {} while reading {what} (at byte {}, {n} bytes)",
                self.b.len(),
                self.pos
            ));
        };
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }

    /// A count or length, bounded by what the rest of the file could hold.
    fn len(&mut self, what: &str, min_item: usize) -> Result<usize, String> {
        let n = self.u64(what)?;
        let left = (self.b.len() - self.pos) / min_item.max(1);
        if n > left as u64 {
            return Err(format!("corrupt or truncated: {what} is {n}, more than the rest of the file holds"));
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        let n = self.len(what, 1)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value, String> {
        let what = format!("the value of {key}");
        Ok(match ty {
            0 => Value::Uint(self.take(1, &what)?[0] as u64),
            1 => Value::Int(self.take(1, &what)?[0] as i8 as i64),
            2 => Value::Uint(u16::from_le_bytes(self.take(2, &what)?.try_into().expect("2")) as u64),
            3 => Value::Int(i16::from_le_bytes(self.take(2, &what)?.try_into().expect("2")) as i64),
            4 => Value::Uint(self.u32(&what)? as u64),
            5 => Value::Int(self.u32(&what)? as i32 as i64),
            6 => Value::Float(f32::from_bits(self.u32(&what)?) as f64),
            7 => Value::Bool(self.take(1, &what)?[0] != 0),
            8 => Value::Str(self.string(&what)?),
            9 if depth == 0 => {
                let ety = self.u32(&what)?;
                let n = self.len(&format!("the length of {key}"), 1)?;
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(ety, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::Uint(self.u64(&what)?),
            11 => Value::Int(self.u64(&what)? as i64),
            12 => Value::Float(f64::from_bits(self.u64(&what)?)),
            _ => return Err(format!("metadata {key} has value type {ty}, which GGUF does not define")),
        })
    }
}

impl Gguf {
    pub(crate) fn open(path: &Path) -> Result<Gguf, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: the map is read only; a model file changed under a running job would give
        // wrong numbers, not unsafety in this process's own memory (the bytes are plain data,
        // every read of them is bounds-checked against the map's length). It lives only while
        // the header is parsed: the tensors are mapped one by one, each rank its own rows.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(file, &map).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn parse(file: File, map: &[u8]) -> Result<Gguf, String> {
        let mut c = Cursor { b: map, pos: 0 };
        let magic = c.take(4, "the magic number").map_err(|_| "not a GGUF file (too short)".to_string())?;
        if magic != b"GGUF" {
            return Err(format!("not a GGUF file (it starts with {magic:02x?}, not \"GGUF\")"));
        }
        let version = c.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version}; mpr-llm reads versions 2 and 3"));
        }
        let n_tensors = c.len("the tensor count", 24)?;
        let n_kv = c.len("the metadata count", 13)?;
        let mut meta = HashMap::new();
        for _ in 0..n_kv {
            let key = c.string("a metadata key")?;
            let ty = c.u32(&format!("the type of {key}"))?;
            let v = c.value(ty, &key, 0)?;
            meta.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string("a tensor name")?;
            let nd = c.u32(&format!("the dimensions of {name}"))? as usize;
            if nd == 0 || nd > 4 {
                return Err(format!("tensor {name} has {nd} dimensions (GGUF allows 1 to 4)"));
            }
            let mut dims = Vec::with_capacity(nd);
            for _ in 0..nd {
                dims.push(c.u64(&format!("the dimensions of {name}"))? as usize);
            }
            let ty = c.u32(&format!("the type of {name}"))?;
            let offset = c.u64(&format!("the offset of {name}"))? as usize;
            let Some(dtype) = DType::from_ggml(ty) else {
                return Err(format!(
                    "tensor {name} has type {}, which mpr-llm does not read (it reads F32, F16, BF16, Q8_0, Q4_0 \
                     and Q4_1)",
                    ggml_type_name(ty)
                ));
            };
            infos.push((name, dims, dtype, offset));
        }
        let align = meta.get("general.alignment").and_then(Value::as_u64).unwrap_or(32) as usize;
        if align == 0 || !align.is_power_of_two() {
            return Err(format!("general.alignment is {align}, not a power of two"));
        }
        let data = c.pos.div_ceil(align) * align;
        let mut tensors = HashMap::new();
        for (name, dims, dtype, offset) in infos {
            let (per, bytes) = dtype.block();
            let n: usize =
                dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or(format!("{name} is too large"))?;
            if dims[0] % per != 0 {
                return Err(format!(
                    "tensor {name}: rows of {} elements do not fill {} blocks of {per}",
                    dims[0],
                    dtype.name()
                ));
            }
            let len = n / per * bytes;
            let start = data.checked_add(offset).ok_or(format!("{name}: offset out of range"))?;
            if start.checked_add(len).is_none_or(|e| e > map.len()) {
                return Err(format!(
                    "truncated: tensor {name} ({} {:?}) lies at bytes {start}..{}, the file has {}",
                    dtype.name(),
                    dims,
                    start + len,
                    map.len()
                ));
            }
            tensors.insert(name, TensorInfo { dims, dtype, start, len });
        }
        Ok(Gguf { file, meta, tensors })
    }

    /// The file that holds tensor `t`, the offset of its first byte in it, and its length.
    pub(crate) fn place(&self, t: &TensorInfo) -> (&File, u64, usize) {
        (&self.file, t.start as u64, t.len)
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<&TensorInfo, String> {
        self.tensors.get(name).ok_or_else(|| format!("the model has no tensor {name}"))
    }

    pub(crate) fn uint(&self, key: &str) -> Result<usize, String> {
        let v = self.meta.get(key).ok_or_else(|| format!("the model's metadata has no {key}"))?;
        v.as_u64().map(|v| v as usize).ok_or_else(|| format!("metadata {key} is not a whole number"))
    }

    pub(crate) fn float(&self, key: &str) -> Result<f64, String> {
        let v = self.meta.get(key).ok_or_else(|| format!("the model's metadata has no {key}"))?;
        v.as_f64().ok_or_else(|| format!("metadata {key} is not a number"))
    }

    pub(crate) fn string(&self, key: &str) -> Result<&str, String> {
        let v = self.meta.get(key).ok_or_else(|| format!("the model's metadata has no {key}"))?;
        v.as_str().ok_or_else(|| format!("metadata {key} is not a string"))
    }
}
