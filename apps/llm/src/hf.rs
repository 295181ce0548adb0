//! A Hugging Face model directory: `config.json`, the weights in one or more safetensors
//! files (`model.safetensors`, or the shards `model.safetensors.index.json` lists), each
//! tensor memory-mapped where it lies, and the tokenizer in
//! `tokenizer.json` (its chat template and special tokens in `tokenizer_config.json`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::gguf::DType;

/// One tensor: which file, where its bytes lie in it, its type and shape.
#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    file: usize,
    start: usize,
    len: usize,
    pub(crate) dtype: DType,
    /// Dimensions, slowest first (a matrix is shape[0] rows of shape[1]).
    pub(crate) shape: Vec<usize>,
}

/// An open model directory.
#[derive(Debug)]
pub(crate) struct HfDir {
    files: Vec<File>,
    pub(crate) tensors: HashMap<String, TensorInfo>,
    pub(crate) config: Value,
    pub(crate) tokenizer: Value,
    /// `tokenizer_config.json`, or null where there is none.
    pub(crate) tokenizer_config: Value,
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

fn dtype(name: &str, d: safetensors::Dtype) -> Result<DType, String> {
    Ok(match d {
        safetensors::Dtype::F32 => DType::F32,
        safetensors::Dtype::F16 => DType::F16,
        safetensors::Dtype::BF16 => DType::BF16,
        other => {
            return Err(format!(
                "tensor {name} has type {other:?}, which mpr-llm does not read from safetensors (it reads F32, F16 \
                 and BF16)"
            ))
        }
    })
}

impl HfDir {
    pub(crate) fn open(dir: &Path) -> Result<HfDir, String> {
        let config = read_json(&dir.join("config.json"))?;
        let tokenizer = read_json(&dir.join("tokenizer.json"))?;
        let tc = dir.join("tokenizer_config.json");
        let tokenizer_config = if tc.exists() { read_json(&tc)? } else { Value::Null };
        // The weights: one file, or the shards an index names.
        let index = dir.join("model.safetensors.index.json");
        let paths: Vec<PathBuf> = if index.exists() {
            let idx = read_json(&index)?;
            let map = idx["weight_map"].as_object().ok_or_else(|| format!("{}: no weight_map", index.display()))?;
            let mut names: Vec<&str> = map.values().filter_map(Value::as_str).collect();
            names.sort_unstable();
            names.dedup();
            names.into_iter().map(|n| dir.join(n)).collect()
        } else {
            vec![dir.join("model.safetensors")]
        };
        let mut files = Vec::new();
        let mut tensors = HashMap::new();
        for path in paths {
            let file = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            // SAFETY: the map is read only; a model file changed under a running job would
            // give wrong numbers, not unsafety in this process's own memory (the bytes are
            // plain data, every tensor's range checked against the map's length below). It
            // lives only while the header is read: the tensors are mapped one by one.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("{}: {e}", path.display()))?;
            let (header, meta) = safetensors::SafeTensors::read_metadata(&map)
                .map_err(|e| format!("{}: not a safetensors file, or cut short: {e}", path.display()))?;
            let data = 8 + header;
            for (name, info) in meta.tensors() {
                let (s, e) = info.data_offsets;
                if data + e > map.len() || s > e {
                    return Err(format!(
                        "{}: truncated: tensor {name} lies at bytes {}..{}, the file has {}",
                        path.display(),
                        data + s,
                        data + e,
                        map.len()
                    ));
                }
                let dtype = dtype(&name, info.dtype).map_err(|e| format!("{}: {e}", path.display()))?;
                let t = TensorInfo { file: files.len(), start: data + s, len: e - s, dtype, shape: info.shape.clone() };
                tensors.insert(name, t);
            }
            files.push(file);
        }
        Ok(HfDir { files, tensors, config, tokenizer, tokenizer_config })
    }

    /// The file that holds tensor `t`, the offset of its first byte in it, and its length.
    pub(crate) fn place(&self, t: &TensorInfo) -> (&File, u64, usize) {
        (&self.files[t.file], t.start as u64, t.len)
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<&TensorInfo, String> {
        self.tensors.get(name).ok_or_else(|| format!("the model has no tensor {name}"))
    }

    /// A whole number of config.json.
    pub(crate) fn uint(&self, key: &str) -> Result<usize, String> {
        match self.config.get(key) {
            None | Some(Value::Null) => Err(format!("config.json has no {key}")),
            Some(v) => {
                v.as_u64().map(|v| v as usize).ok_or_else(|| format!("config.json: {key} is not a whole number"))
            }
        }
    }

    pub(crate) fn float(&self, key: &str) -> Result<f64, String> {
        match self.config.get(key) {
            None | Some(Value::Null) => Err(format!("config.json has no {key}")),
            Some(v) => v.as_f64().ok_or_else(|| format!("config.json: {key} is not a number")),
        }
    }
}

/// A Hugging Face Llama tensor's name for the GGUF name `name` (the names the model is
/// written in): `blk.3.attn_q.weight` is `model.layers.3.self_attn.q_proj.weight`.
pub(crate) fn hf_name(name: &str) -> String {
    let simple = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output.weight", "lm_head.weight"),
        ("output_norm.weight", "model.norm.weight"),
    ];
    if let Some((_, hf)) = simple.iter().find(|(g, _)| *g == name) {
        return hf.to_string();
    }
    let parts = [
        ("attn_norm", "input_layernorm"),
        ("ffn_norm", "post_attention_layernorm"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_output", "self_attn.o_proj"),
        ("ffn_gate", "mlp.gate_proj"),
        ("ffn_up", "mlp.up_proj"),
        ("ffn_down", "mlp.down_proj"),
    ];
    if let Some(rest) = name.strip_prefix("blk.") {
        if let Some((layer, rest)) = rest.split_once('.') {
            if let Some((part, suffix)) = rest.split_once('.') {
                if let Some((_, hf)) = parts.iter().find(|(g, _)| *g == part) {
                    return format!("model.layers.{layer}.{hf}.{suffix}");
                }
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_map_to_hugging_face_names() {
        assert_eq!(super::hf_name("blk.12.attn_output.weight"), "model.layers.12.self_attn.o_proj.weight");
        assert_eq!(super::hf_name("blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
        assert_eq!(super::hf_name("output.weight"), "lm_head.weight");
    }
}
