//! Where a model comes from: a GGUF file, or a Hugging Face directory (config.json,
//! safetensors, tokenizer.json). The model asks for its tensors by GGUF's names and gets
//! them as the file stores them, memory-mapped.

use std::ops::Range;
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

    /// Tensor `name` (GGUF's name), `rows` x `cols`, as stored.
    pub(crate) fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Mat<'_>, String> {
        let (dtype, bytes, _) = self.lookup(name, rows, cols)?;
        Ok(Mat::new(dtype, rows, cols, bytes))
    }

    /// Columns `part` (whole blocks) of every row of matrix `name` (`rows` x `cols`), read
    /// from the file into this process's own memory. For O and down, whose tensor-parallel
    /// shards are columns: read through the map, a rank would touch every page of them.
    /// All the columns: the map itself.
    pub(crate) fn columns(&self, name: &str, rows: usize, cols: usize, part: Range<usize>) -> Result<Mat<'_>, String> {
        let (dtype, bytes, name) = self.lookup(name, rows, cols)?;
        if part == (0..cols) {
            return Ok(Mat::new(dtype, rows, cols, bytes));
        }
        let (per, block) = dtype.block();
        if !(part.start.is_multiple_of(per) && part.end.is_multiple_of(per) && part.end <= cols) {
            return Err(format!("tensor {name}: columns {part:?} are not whole blocks of {per} within {cols}"));
        }
        let (row, skip, take) = (cols / per * block, part.start / per * block, part.len() / per * block);
        let mut data = vec![0u8; rows * take];
        if take == 0 {
            return Ok(Mat::new(dtype, rows, 0, data));
        }
        for (r, out) in data.chunks_exact_mut(take).enumerate() {
            let at = r * row + skip;
            match self {
                Weights::Gguf(g) => g.read_at(g.tensor(&name)?, at, out),
                Weights::Hf(h) => h.read_at(h.tensor(&name)?, at, out),
            }
            .map_err(|e| format!("tensor {name}: reading row {r}: {e}"))?;
        }
        Ok(Mat::new(dtype, rows, part.len(), data))
    }

    /// Tensor `name`'s type, bytes and name in the file, checked to be `rows` x `cols`.
    fn lookup(&self, name: &str, rows: usize, cols: usize) -> Result<(DType, &[u8], String), String> {
        let (dtype, dims, bytes, name) = match self {
            Weights::Gguf(g) => {
                let t = g.tensor(name)?;
                // GGUF lists dimensions fastest first.
                (t.dtype, t.dims.iter().rev().copied().collect::<Vec<_>>(), g.bytes(t), name.to_string())
            }
            Weights::Hf(h) => {
                let name = hf_name(name);
                let t = h.tensor(&name)?;
                (t.dtype, t.shape.clone(), h.bytes(t), name)
            }
        };
        let want: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
        if dims != want {
            return Err(format!("tensor {name} is {dims:?}; the model's shape needs {want:?}"));
        }
        Ok((dtype, bytes, name))
    }

    /// Vector `name`, `n` elements, as f32.
    pub(crate) fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, String> {
        Ok(self.matrix(name, 1, n)?.row(0))
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
