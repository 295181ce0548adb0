//! The model's tokenizer, from its GGUF metadata: GPT-2 style byte-level BPE
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
        let types: Vec<u64> = match g.meta.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(v) => v.iter().map(|t| t.as_u64().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        let mut ranks = HashMap::new();
        for (i, m) in list("tokenizer.ggml.merges")?.iter().enumerate() {
            let m = m.as_str().ok_or("a merge that is not a string")?;
            let (a, b) = m.split_once(' ').ok_or_else(|| format!("merge {i} ({m:?}) is not two tokens"))?;
            ranks.insert((a.to_string(), b.to_string()), i);
        }
        let ids: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        // Types: 3 control, 4 user-defined.
        let mut special: Vec<(String, u32)> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (t, &ty))| (ty == 3 || ty == 4) && !t.is_empty())
            .map(|(i, (t, _))| (t.clone(), i as u32))
            .collect();
        special.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        let pre_name = g.string("tokenizer.ggml.pre").unwrap_or("default");
        let pre = pre_regexes(pre_name)?
            .into_iter()
            .map(|r| Regex::new(r).map_err(|e| format!("pre-tokenizer {pre_name}: {e}")))
            .collect::<Result<_, _>>()?;
        let byte_char = byte_chars();
        let char_byte = byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let id = |key: &str| g.uint(key).ok().map(|v| v as u32).filter(|&v| (v as usize) < tokens.len());
        let add_bos = matches!(g.meta.get("tokenizer.ggml.add_bos_token"), Some(Value::Bool(true)));
        Ok(Tokenizer {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos,
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
