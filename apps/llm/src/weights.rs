//! Where a model comes from: a GGUF file, or a Hugging Face directory (config.json,
//! safetensors, tokenizer.json). The model asks for its tensors by GGUF's names and gets
//! them as the file stores them: memory-mapped, each rank mapping only its own rows.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::gguf::{DType, Gguf};
use crate::hf::{hf_name, HfDir};
use crate::model::{Config, RopePairs};
use crate::quant::Mat;
use crate::tokenizer::Tokenizer;

#[derive(Debug)]
pub(crate) enum Weights {
    Gguf(Gguf),
    Hf(HfDir),
}

impl Weights {
    /// A directory is a Hugging Face model; a file, GGUF.
    pub(crate) fn open(path: &Path) -> Result<Weights, String> {
        if path.is_dir() {
            HfDir::open(path).map(Weights::Hf).map_err(|e| format!("{}: {e}", path.display()))
        } else {
            Gguf::open(path).map(Weights::Gguf)
        }
    }

    pub(crate) fn config(&self) -> Result<Config, String> {
        match self {
            Weights::Gguf(g) => Config::from_gguf(g),
            Weights::Hf(h) => Config::from_hf(h),
        }
    }

    pub(crate) fn tokenizer(&self) -> Result<Tokenizer, String> {
        match self {
            Weights::Gguf(g) => Tokenizer::from_gguf(g),
            Weights::Hf(h) => Tokenizer::from_json(&h.tokenizer, &h.tokenizer_config),
        }
    }

    /// The model's chat template (a Jinja template).
    pub(crate) fn chat_template(&self) -> Result<&str, String> {
        let t = match self {
            Weights::Gguf(g) => g.string("tokenizer.chat_template").ok(),
            Weights::Hf(h) => h.tokenizer_config["chat_template"].as_str(),
        };
        t.ok_or_else(|| "--chat: the model has no chat template".to_string())
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        match self {
            Weights::Gguf(g) => g.tensors.contains_key(name),
            Weights::Hf(h) => h.tensors.contains_key(&hf_name(name)),
        }
    }

    /// Rows `part` of matrix `name` (`rows` x `cols`), memory-mapped: a map of exactly those
    /// rows. The kernel maps a whole cached folio around a fault (up to 2 MiB, much more than
    /// a row), but never beyond the map, so the pages a rank holds are its own rows', not its
    /// neighbours' (through one map of the file, a tensor-parallel rank held most of them).
    pub(crate) fn rows(&self, name: &str, rows: usize, cols: usize, part: Range<usize>) -> Result<Mat, String> {
        let t = self.tensor(name, rows, cols)?;
        if part.end > rows {
            return Err(format!("tensor {}: rows {part:?} of {rows}", t.name));
        }
        let len = part.len() * t.row_bytes();
        if len == 0 {
            return Ok(Mat::new(t.dtype, 0, cols, Vec::new()));
        }
        let at = t.start + (part.start * t.row_bytes()) as u64;
        // SAFETY: read only, as the header's map in Gguf::open; the rows lie within the
        // tensor, which lies within the file (checked when the file was opened).
        let map = unsafe { memmap2::MmapOptions::new().offset(at).len(len).map(t.file) }
            .map_err(|e| format!("tensor {}: mapping rows {part:?}: {e}", t.name))?;
        Ok(Mat::new(t.dtype, part.len(), cols, map))
    }

    /// Columns `part` (whole blocks) of every row of matrix `name` (`rows` x `cols`), read
    /// from the file into this process's own memory. For O and down, whose tensor-parallel
    /// shards are columns: mapped, a rank would hold every page of them. All the columns:
    /// mapped, as [`Weights::rows`].
    pub(crate) fn columns(&self, name: &str, rows: usize, cols: usize, part: Range<usize>) -> Result<Mat, String> {
        if part == (0..cols) {
            return self.rows(name, rows, cols, 0..rows);
        }
        let t = self.tensor(name, rows, cols)?;
        let (per, block) = t.dtype.block();
        if !(part.start.is_multiple_of(per) && part.end.is_multiple_of(per) && part.end <= cols) {
            return Err(format!("tensor {}: columns {part:?} are not whole blocks of {per} within {cols}", t.name));
        }
        let (skip, take) = (part.start / per * block, part.len() / per * block);
        let mut data = vec![0u8; rows * take];
        if take > 0 {
            for (r, out) in data.chunks_exact_mut(take).enumerate() {
                t.read(r, skip, out)?;
            }
        }
        Ok(Mat::new(t.dtype, rows, part.len(), data))
    }

    /// Matrix `name` (`rows` x `cols`), its rows to be read one by one when asked for.
    pub(crate) fn tensor(&self, name: &str, rows: usize, cols: usize) -> Result<Tensor<'_>, String> {
        let (dtype, dims, (file, start, len), name) = match self {
            Weights::Gguf(g) => {
                let t = g.tensor(name)?;
                // GGUF lists dimensions fastest first.
                (t.dtype, t.dims.iter().rev().copied().collect::<Vec<_>>(), g.place(t), name.to_string())
            }
            Weights::Hf(h) => {
                let name = hf_name(name);
                let t = h.tensor(&name)?;
                (t.dtype, t.shape.clone(), h.place(t), name)
            }
        };
        let want: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
        if dims != want {
            return Err(format!("tensor {name} is {dims:?}; the model's shape needs {want:?}"));
        }
        let t = Tensor { name, dtype, rows, cols, file, start };
        debug_assert_eq!(rows * t.row_bytes(), len, "the file's tensor {} is its shape", t.name);
        Ok(t)
    }

    /// Vector `name`, `n` elements, as f32, read from the file.
    pub(crate) fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, String> {
        self.tensor(name, 1, n)?.row(0)
    }
}

/// A matrix where the file holds it, read a row at a time: for the embedding, of which a
/// prompt needs a few rows from anywhere in the vocabulary.
#[derive(Debug)]
pub(crate) struct Tensor<'a> {
    name: String,
    dtype: DType,
    rows: usize,
    cols: usize,
    file: &'a File,
    start: u64,
}

impl Tensor<'_> {
    fn row_bytes(&self) -> usize {
        let (per, bytes) = self.dtype.block();
        self.cols / per * bytes
    }

    /// `out.len()` bytes of row `r` from byte `skip` of it, read from the file (not through a
    /// map: the pages stay in the page cache, shared, not in this process).
    fn read(&self, r: usize, skip: usize, out: &mut [u8]) -> Result<(), String> {
        debug_assert!(r < self.rows && skip + out.len() <= self.row_bytes());
        self.file
            .read_exact_at(out, self.start + (r * self.row_bytes() + skip) as u64)
            .map_err(|e| format!("tensor {}: reading row {r}: {e}", self.name))
    }

    /// Row `r` as f32.
    pub(crate) fn row(&self, r: usize) -> Result<Vec<f32>, String> {
        if r >= self.rows {
            return Err(format!("tensor {}: row {r} of {}", self.name, self.rows));
        }
        let mut b = vec![0u8; self.row_bytes()];
        self.read(r, 0, &mut b)?;
        Ok(Mat::new(self.dtype, 1, self.cols, b).row(0))
    }
}

impl Config {
    /// From a Hugging Face config.json (`model_type` llama).
    pub(crate) fn from_hf(h: &HfDir) -> Result<Config, String> {
        let c = &h.config;
        if c["model_type"].as_str() != Some("llama") {
            return Err(format!("config.json: model_type {}: mpr-llm runs Llama-architecture models", c["model_type"]));
        }
        for (key, fine) in [("rope_scaling", None), ("attention_bias", Some(false)), ("mlp_bias", Some(false))] {
            let v = &c[key];
            if !(v.is_null() || v.as_bool() == fine && fine.is_some()) {
                return Err(format!("config.json: {key} = {v} is not implemented"));
            }
        }
        if c["hidden_act"].as_str().is_some_and(|a| a != "silu") {
            return Err(format!("config.json: hidden_act {} is not implemented (SiLU is)", c["hidden_act"]));
        }
        let (dim, heads) = (h.uint("hidden_size")?, h.uint("num_attention_heads")?);
        let kv_heads = h.uint("num_key_value_heads").unwrap_or(heads);
        let head_dim = h.uint("head_dim").unwrap_or(dim.checked_div(heads).unwrap_or(0));
        Config::checked(Config {
            dim,
            layers: h.uint("num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim,
            ffn: h.uint("intermediate_size")?,
            vocab: h.uint("vocab_size")?,
            eps: h.float("rms_norm_eps")? as f32,
            rope_base: h.float("rope_theta").unwrap_or(10000.0) as f32,
            ctx: h.uint("max_position_embeddings").unwrap_or(2048),
            rope: RopePairs::Halves,
        })
    }
}
