//! The model's tokenizer, from its GGUF metadata or a Hugging Face `tokenizer.json`: GPT-2 style byte-level BPE
//! (`tokenizer.ggml.model` = `gpt2`): control tokens (`<|im_start|>` ...) matched literally,
//! the rest pre-split by the pre-tokenizer's regular expressions, each piece's bytes mapped
//! to GPT-2's printable characters, then merged pair by pair in the order of the merge list.

use std::collections::HashMap;

use fancy_regex::Regex;

use crate::gguf::{Gguf, Value};

#[derive(Debug)]
pub(crate) struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    ranks: HashMap<(String, String), usize>,
    /// Control and user-defined tokens, longest first, matched before the pre-tokenizer.
    special: Vec<(String, u32)>,
    pre: Vec<Regex>,
    byte_char: [char; 256],
    char_byte: HashMap<char, u8>,
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) add_bos: bool,
}

/// GPT-2's map from bytes to printable characters: printable Latin-1 bytes stand for
/// themselves, the others for the characters from U+0100 on, in order.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        out[b as usize] = if printable {
            char::from_u32(b).expect("latin-1")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("a character")
        };
    }
    out
}

/// The pre-tokenizer's expressions, applied in turn, by `tokenizer.ggml.pre` (llama.cpp's
/// names). GPT-2's expression last.
fn pre_regexes(pre: &str) -> Result<Vec<&'static str>, String> {
    const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    Ok(match pre {
        "default" | "gpt2" | "gpt-2" | "mpt" | "olmo" => vec![GPT2],
        // Digits one by one, then GPT-2's.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" => vec![r"\p{N}", GPT2],
        "llama3" | "llama-bpe" | "llama-v3" => vec![
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        other => return Err(format!("tokenizer.ggml.pre = {other:?}: a pre-tokenizer mpr-llm does not know")),
    })
}

/// The expressions of a `tokenizer.json` pre-tokenizer, in order; `byte_level` set if it
/// maps bytes to GPT-2's characters (as byte-level BPE does).
fn json_pre(p: &serde_json::Value, out: &mut Vec<String>, byte_level: &mut bool) -> Result<(), String> {
    const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    match p["type"].as_str() {
        Some("Sequence") => {
            for q in p["pretokenizers"].as_array().map_or(&[][..], |v| v) {
                json_pre(q, out, byte_level)?;
            }
        }
        Some("ByteLevel") => {
            *byte_level = true;
            if p["add_prefix_space"].as_bool() == Some(true) {
                return Err("tokenizer.json: ByteLevel with add_prefix_space is not implemented".into());
            }
            if p["use_regex"].as_bool() != Some(false) {
                out.push(GPT2.into());
            }
        }
        Some("Digits") => {
            out.push(if p["individual_digits"].as_bool() == Some(true) { r"\p{N}" } else { r"\p{N}+" }.into())
        }
        Some("Split") if p["behavior"].as_str() == Some("Isolated") && p["invert"].as_bool() != Some(true) => {
            let pat = &p["pattern"];
            match (pat["Regex"].as_str(), pat["String"].as_str()) {
                (Some(r), _) => out.push(r.to_string()),
                (None, Some(s)) => out.push(fancy_regex::escape(s).into_owned()),
                _ => return Err(format!("tokenizer.json: a Split pre-tokenizer's pattern {pat}")),
            }
        }
        _ => return Err(format!("tokenizer.json: pre-tokenizer {p} is not implemented")),
    }
    Ok(())
}

impl Tokenizer {
    pub(crate) fn from_gguf(g: &Gguf) -> Result<Tokenizer, String> {
        let model = g.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(format!("tokenizer.ggml.model = {model:?}: mpr-llm reads GPT-2 style BPE (\"gpt2\")"));
        }
        let list = |key: &str| -> Result<&[Value], String> {
            g.meta.get(key).and_then(Value::as_array).ok_or_else(|| format!("the model's metadata has no list {key}"))
        };
        let tokens: Vec<String> = list("tokenizer.ggml.tokens")?
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or("a token that is not a string".to_string()))
            .collect::<Result<_, _>>()?;
        // Types: 3 control, 4 user-defined: matched literally.
        let special: Vec<bool> = match g.meta.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(v) => v.iter().map(|t| matches!(t.as_u64(), Some(3 | 4))).collect(),
            None => vec![false; tokens.len()],
        };
        let mut merges = Vec::new();
        for (i, m) in list("tokenizer.ggml.merges")?.iter().enumerate() {
            let m = m.as_str().ok_or("a merge that is not a string")?;
            let (a, b) = m.split_once(' ').ok_or_else(|| format!("merge {i} ({m:?}) is not two tokens"))?;
            merges.push((a.to_string(), b.to_string()));
        }
        let pre_name = g.string("tokenizer.ggml.pre").unwrap_or("default");
        let pre = pre_regexes(pre_name)?.into_iter().map(str::to_string).collect();
        let id = |key: &str| g.uint(key).ok().map(|v| v as u32);
        let add_bos = matches!(g.meta.get("tokenizer.ggml.add_bos_token"), Some(Value::Bool(true)));
        let ends = (id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"), add_bos);
        Tokenizer::new(tokens, &special, merges, pre, ends)
    }

    /// From a Hugging Face `tokenizer.json` (byte-level BPE) and `tokenizer_config.json`
    /// (null where there is none; its special tokens and whether BOS comes first).
    pub(crate) fn from_json(json: &serde_json::Value, config: &serde_json::Value) -> Result<Tokenizer, String> {
        use serde_json::Value as J;
        let m = &json["model"];
        if m["type"].as_str() != Some("BPE") {
            return Err(format!("tokenizer.json: model type {}: mpr-llm reads byte-level BPE", m["type"]));
        }
        let vocab = m["vocab"].as_object().ok_or("tokenizer.json: the model has no vocab")?;
        let mut tokens: Vec<String> = Vec::new();
        let mut special = Vec::new();
        let mut put = |tokens: &mut Vec<String>, t: &str, id: &J, is_special: bool| -> Result<(), String> {
            let id =
                id.as_u64().filter(|&i| i < 1 << 24).ok_or_else(|| format!("tokenizer.json: token {t:?}'s id {id}"))?;
            let id = id as usize;
            if tokens.len() <= id {
                tokens.resize(id + 1, String::new());
                special.resize(id + 1, false);
            }
            tokens[id] = t.to_string();
            special[id] = is_special;
            Ok(())
        };
        for (t, id) in vocab {
            put(&mut tokens, t, id, false)?;
        }
        // Added tokens (special or not) are matched whole, before the pre-tokenizer.
        for a in json["added_tokens"].as_array().map_or(&[][..], |v| v) {
            let t = a["content"].as_str().ok_or("tokenizer.json: an added token without content")?;
            put(&mut tokens, t, &a["id"], true)?;
        }
        let mut merges = Vec::new();
        for (i, mg) in m["merges"].as_array().ok_or("tokenizer.json: the model has no merges")?.iter().enumerate() {
            // "a b", or (newer files) ["a", "b"].
            let pair = match mg {
                J::String(s) => s.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())),
                J::Array(v) if v.len() == 2 => v[0].as_str().zip(v[1].as_str()).map(|(a, b)| (a.into(), b.into())),
                _ => None,
            };
            merges.push(pair.ok_or_else(|| format!("tokenizer.json: merge {i} ({mg}) is not two tokens"))?);
        }
        let mut pre = Vec::new();
        let mut byte_level = false;
        json_pre(&json["pre_tokenizer"], &mut pre, &mut byte_level)?;
        if !byte_level {
            return Err("tokenizer.json: no ByteLevel pre-tokenizer; mpr-llm reads byte-level BPE".into());
        }
        if !json["normalizer"].is_null() {
            return Err(format!(
                "tokenizer.json: a normalizer ({}) mpr-llm does not apply",
                json["normalizer"]["type"]
            ));
        }
        let find = |key: &str| -> Option<u32> {
            let t = match &config[key] {
                J::String(s) => s.as_str(),
                J::Object(o) => o.get("content")?.as_str()?,
                _ => return None,
            };
            tokens.iter().position(|x| x == t).map(|i| i as u32)
        };
        let (bos, eos) = (find("bos_token"), find("eos_token"));
        // BOS first where the config says so, or where the post-processor puts it first.
        let first = &json["post_processor"]["single"][0]["SpecialToken"]["id"];
        let add_bos = config["add_bos_token"].as_bool().unwrap_or(false)
            || first.as_str().is_some_and(|t| bos.is_some_and(|b| tokens[b as usize] == t));
        Tokenizer::new(tokens, &special, merges, pre, (bos, eos, add_bos))
    }

    /// `special[i]`: token i is matched literally; `ends`: BOS, EOS, BOS put first.
    fn new(
        tokens: Vec<String>,
        special: &[bool],
        merges: Vec<(String, String)>,
        pre: Vec<String>,
        ends: (Option<u32>, Option<u32>, bool),
    ) -> Result<Tokenizer, String> {
        let ranks = merges.into_iter().enumerate().map(|(i, m)| (m, i)).collect();
        let ids: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut special: Vec<(String, u32)> = tokens
            .iter()
            .zip(special)
            .enumerate()
            .filter(|(_, (t, &s))| s && !t.is_empty())
            .map(|(i, (t, _))| (t.clone(), i as u32))
            .collect();
        special.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let pre = pre
            .iter()
            .map(|r| Regex::new(r).map_err(|e| format!("the pre-tokenizer's expression {r:?}: {e}")))
            .collect::<Result<_, _>>()?;
        let byte_char = byte_chars();
        let char_byte = byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let known = |id: Option<u32>| id.filter(|&v| (v as usize) < tokens.len());
        Ok(Tokenizer {
            bos: known(ends.0),
            eos: known(ends.1),
            add_bos: ends.2,
            tokens,
            ids,
            ranks,
            special,
            pre,
            byte_char,
            char_byte,
        })
    }

    pub(crate) fn vocab(&self) -> usize {
        self.tokens.len()
    }

    /// The ids of `text` (control tokens in it recognized), BOS first if the model asks.
    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos {
            out.extend(self.bos);
        }
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest control token, longest first at the same place.
            let hit = self
                .special
                .iter()
                .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, t.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            let (plain, next) = match hit {
                Some((at, len, id)) => {
                    let plain = &rest[..at];
                    self.encode_plain(plain, &mut out);
                    out.push(id);
                    (None, &rest[at + len..])
                }
                None => (Some(rest), ""),
            };
            if let Some(p) = plain {
                self.encode_plain(p, &mut out);
            }
            rest = next;
        }
        out
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let mut pieces = vec![text.to_string()];
        for re in &self.pre {
            let mut next = Vec::new();
            for p in &pieces {
                let mut at = 0;
                for m in re.find_iter(p).flatten() {
                    if m.start() > at {
                        next.push(p[at..m.start()].to_string());
                    }
                    if !m.as_str().is_empty() {
                        next.push(m.as_str().to_string());
                    }
                    at = m.end();
                }
                if at < p.len() {
                    next.push(p[at..].to_string());
                }
            }
            pieces = next;
        }
        for p in pieces {
            self.bpe(&p, out);
        }
    }

    /// One pre-tokenized piece: its bytes as GPT-2 characters, merged by rank.
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) {
        let mut parts: Vec<String> = piece.bytes().map(|b| self.byte_char[b as usize].to_string()).collect();
        loop {
            let best = parts
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| self.ranks.get(&(w[0].clone(), w[1].clone())).map(|&r| (r, i)))
                .min();
            let Some((_, i)) = best else { break };
            let merged = format!("{}{}", parts[i], parts[i + 1]);
            parts.splice(i..i + 2, [merged]);
        }
        for p in parts {
            match self.ids.get(&p) {
                Some(&id) => out.push(id),
                // A piece the vocabulary lacks: its characters one by one.
                None => out.extend(p.chars().filter_map(|c| self.ids.get(&c.to_string()).copied())),
            }
        }
    }

    /// The bytes token `id` stands for (control tokens as their text).
    pub(crate) fn bytes(&self, id: u32) -> Vec<u8> {
        let Some(t) = self.tokens.get(id as usize) else { return Vec::new() };
        if self.special.iter().any(|(_, s)| *s == id) {
            return t.as_bytes().to_vec();
        }
        t.chars().map(|c| self.char_byte.get(&c).copied().unwrap_or(b'?')).collect()
    }
}
