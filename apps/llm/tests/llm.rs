//! `mpr-llm` through mprun on the real SmolLM2-135M-Instruct (Q4_1 GGUF, fetched by
//! `apps/llm/fetch-model.sh` into the model cache), and its errors on bad model files.

use std::path::PathBuf;

use mpr_tests::{mprun, text};

fn llm() -> String {
    env!("CARGO_BIN_EXE_mpr-llm").to_string()
}

/// The cached model (`MPR_MODEL_DIR`, default ~/.cache/mpr/models), if it is there.
fn model() -> Option<String> {
    let dir = std::env::var_os("MPR_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/mpr/models"));
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        return Some(path.to_str().unwrap().to_string());
    }
    mpr_tests::cannot_run(&format!("no {}: run apps/llm/fetch-model.sh", path.display()));
    None
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpr-llm-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn logits(path: &std::path::Path) -> Vec<Vec<f32>> {
    let t = std::fs::read_to_string(path).unwrap();
    t.lines().map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect()).collect()
}

#[test]
fn the_capital_of_france_is_paris_on_every_split() {
    let Some(model) = model() else { return };
    let dir = scratch("paris");
    let mut one: Option<Vec<Vec<f32>>> = None;
    let mut mem1: Option<(f64, f64)> = None;
    // Tensor parallel on 1, 2 and 3 ranks (SmolLM2's 9 query heads and 3 KV heads split
    // unevenly, a KV head shared by two ranks), pipelines of 2 and 3 stages, and both (2 x 2).
    for (np, tp, pp) in
        [("1", "1", "1"), ("2", "2", "1"), ("3", "3", "1"), ("2", "1", "2"), ("3", "1", "3"), ("4", "2", "2")]
    {
        let dump = dir.join(format!("logits-{np}-{pp}"));
        let args = ["-np", np, &llm(), "--model", &model, "--prompt", "The capital of France is", "--tokens", "8"];
        let split = ["--tp", tp, "--pp", pp, "--dump-logits", dump.to_str().unwrap()];
        let out = mprun(&[&args[..], &split].concat(), &[]);
        let (so, err) = (text(&out.stdout), text(&out.stderr));
        let what = format!("{np} ranks, tp {tp} x pp {pp}");
        assert!(out.status.success(), "{what}: {so}{err}");
        assert!(so.starts_with(" Paris"), "{what}: the greedy continuation is {so:?}");
        assert!(err.contains("decode: 8 tokens") && err.contains("prefill: 5 tokens"), "{err}");
        if pp == "1" && tp != "1" {
            // Two all-reduces per layer (30 layers) and one for the logits, per token.
            assert!(err.contains("all-reduce: 61.0 per token"), "{err}");
        }
        if tp == "2" && pp == "2" {
            // Rank 0 runs the first 15 layers: two all-reduces each.
            assert!(err.contains("all-reduce: 30.0 per token"), "{err}");
        }
        // Every rank's peak resident memory and its shard of the weights, a figure each.
        let per_rank = |line: &str| -> Vec<f64> {
            let v = err.lines().find_map(|l| l.strip_prefix(line)).unwrap_or("");
            v.split_whitespace().map(|v| v.parse().unwrap()).collect()
        };
        let (rss, shard) =
            (per_rank("peak resident memory per rank (MiB): "), per_rank("weights in each rank's shard (MiB): "));
        let n: f64 = np.parse().unwrap();
        assert!(rss.len() == n as usize && shard.len() == n as usize && rss.iter().all(|&m| m > 10.0), "{err}");
        let (rss1, shard1) = *mem1.get_or_insert((rss[0], shard[0]));
        // What a rank holds beyond its weights (heap, binary, rings) does not grow with the
        // split: it holds none of its neighbours' weights (a map of the whole file held up to
        // 40 MiB of them, by the kernel's mapping of whole cached folios around each fault).
        for (r, (m, w)) in rss.iter().zip(&shard).enumerate() {
            assert!(
                m - w <= rss1 - shard1 + 10.0,
                "{what}: rank {r} holds {m} MiB for a shard of {w}; 1 rank: {rss1} for {shard1}"
            );
        }
        if pp == "1" {
            // Tensor parallel: the weights fall as 1/N (a KV head shared by two ranks is
            // held by both), and so, above the process's own baseline, does the memory.
            let most = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            assert!(most(&shard) <= 1.05 * shard1 / n, "{what}: shards {shard:?} of {shard1}");
            assert!(most(&rss) <= rss1 * (0.5 + 0.6 / n), "{what}: resident {rss:?} MiB; 1 rank: {rss1}");
        } else {
            // The first stage holds no output head, and only its share of the layers.
            assert!(rss[0] <= 0.6 * rss1, "{what}: resident {rss:?} MiB; 1 rank: {rss1}");
        }
        let l = logits(&dump);
        assert_eq!((l.len(), l[0].len()), (5, 49152), "a row of logits per prompt position");
        match &one {
            None => one = Some(l),
            Some(base) => {
                let worst =
                    base.iter().flatten().zip(l.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst <= 1e-4, "{what}: logits differ from 1 rank's by up to {worst}");
            }
        }
    }
    // A split that does not make the job's ranks.
    let out = mprun(&["-np", "2", &llm(), "--model", &model, "--prompt", "Hi", "--tp", "3"], &[]);
    assert!(
        out.status.code() == Some(2) && text(&out.stderr).contains("--tp 3 x --pp 1 is not the job's 2 ranks"),
        "{}",
        text(&out.stderr)
    );
    // A split whose product wraps past 2^64 to the job's 2 ranks is still not it.
    let (tp, pp) = ((1u64 << 63).to_string(), "2");
    let out = mprun(&["-np", "2", &llm(), "--model", &model, "--prompt", "Hi", "--tp", &tp, "--pp", pp], &[]);
    assert!(
        out.status.code() == Some(2)
            && text(&out.stderr).contains(&format!("--tp {tp} x --pp 2 is not the job's 2 ranks")),
        "{}",
        text(&out.stderr)
    );
    // Sampling: the same seed draws the same text; another seed, another text.
    let sampled = |seed: &str| {
        let args = ["-np", "2", &llm(), "--model", &model, "--prompt", "Once upon a time", "--tokens", "24"];
        let out = mprun(
            &[&args[..], &["--temperature", "1.0", "--top-k", "40", "--top-p", "0.95", "--seed", seed]].concat(),
            &[],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let (a, b, c) = (sampled("7"), sampled("7"), sampled("8"));
    assert_eq!(a, b, "one seed, one text");
    assert_ne!(a, c, "two seeds drew the same 24 tokens: {a:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GGUF file with one metadata string and one tensor of ggml type `ty`, 32 x 1.
fn tiny_gguf(ty: u32, data_len: usize) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes()); // tensors
    b.extend(1u64.to_le_bytes()); // metadata
    let s = |b: &mut Vec<u8>, v: &str| {
        b.extend((v.len() as u64).to_le_bytes());
        b.extend(v.as_bytes());
    };
    s(&mut b, "general.architecture");
    b.extend(8u32.to_le_bytes());
    s(&mut b, "llama");
    s(&mut b, "token_embd.weight");
    b.extend(2u32.to_le_bytes());
    b.extend(256u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(ty.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.extend(vec![0u8; data_len]);
    b
}

#[test]
fn bad_model_files_get_clear_errors() {
    let dir = scratch("bad");
    let run = |path: &std::path::Path| {
        let out = mprun(&["-np", "2", &llm(), "--model", path.to_str().unwrap(), "--prompt", "Hi"], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    let missing = dir.join("missing.gguf");
    assert!(run(&missing).contains("missing.gguf: No such file"), "{}", run(&missing));
    let notgguf = dir.join("notes.txt");
    std::fs::write(&notgguf, "not a model at all").unwrap();
    let err = run(&notgguf);
    assert!(err.contains("not a GGUF file"), "{err}");
    // Q6_K (type 14): named with its tensor.
    let q6 = dir.join("q6k.gguf");
    std::fs::write(&q6, tiny_gguf(14, 210)).unwrap();
    let err = run(&q6);
    assert!(err.contains("tensor token_embd.weight has type Q6_K, which mpr-llm does not read"), "{err}");
    // A Q8_0 tensor of 256 x 1 needs 8 blocks of 34 bytes; the file holds 100.
    let short = dir.join("short.gguf");
    std::fs::write(&short, tiny_gguf(8, 100)).unwrap();
    let err = run(&short);
    assert!(err.contains("truncated: tensor token_embd.weight (Q8_0 [256, 1])"), "{err}");
    // Safetensors directories: cut short, a tensor of a type not read, no config.json.
    let hf = dir.join("hf");
    random_model(&hf, 4, 2, 1, 32, "F32", true);
    // A shape whose buffers cannot exist (its products wrap past 2^64): refused before any
    // is sized.
    let config = std::fs::read_to_string(hf.join("config.json")).unwrap();
    let mut huge: serde_json::Value = serde_json::from_str(&config).unwrap();
    huge["head_dim"] = serde_json::json!(1u64 << 62);
    std::fs::write(hf.join("config.json"), huge.to_string()).unwrap();
    let err = run(&hf);
    assert!(err.contains("a model of this shape cannot run: the query width (heads x head dimension) over"), "{err}");
    std::fs::write(hf.join("config.json"), config).unwrap();
    let weights = std::fs::read(hf.join("model.safetensors")).unwrap();
    std::fs::write(hf.join("model.safetensors"), &weights[..weights.len() - 100]).unwrap();
    let err = run(&hf);
    assert!(err.contains("model.safetensors: not a safetensors file, or cut short"), "{err}");
    let header = r#"{"model.norm.weight":{"dtype":"I8","shape":[64],"data_offsets":[0,64]}}"#;
    let mut i8 = (header.len() as u64).to_le_bytes().to_vec();
    i8.extend(header.as_bytes());
    i8.extend([0u8; 64]);
    std::fs::write(hf.join("model.safetensors"), i8).unwrap();
    let err = run(&hf);
    assert!(err.contains("tensor model.norm.weight has type I8, which mpr-llm does not read"), "{err}");
    std::fs::remove_file(hf.join("config.json")).unwrap();
    let err = run(&hf);
    assert!(err.contains("config.json: No such file"), "{err}");
    // The real model cut short: its metadata ends mid-way.
    if let Some(model) = model() {
        let cut = dir.join("cut.gguf");
        let bytes = std::fs::read(&model).unwrap();
        std::fs::write(&cut, &bytes[..1 << 20]).unwrap();
        let err = run(&cut);
        assert!(err.contains("truncated"), "{err}");
        // And a model whose metadata lacks what the architecture needs: the tiny file.
        let tiny = dir.join("tiny.gguf");
        std::fs::write(&tiny, tiny_gguf(8, 272)).unwrap();
        let err = run(&tiny);
        assert!(err.contains("the model's metadata has no llama.embedding_length"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python with numpy and llama.cpp's `gguf` package: `MPR_PYTHON`, else the model cache's
/// venv (`.ci/run` makes it), else `python3`.
fn python() -> Option<String> {
    let venv = PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/mpr/venv/bin/python3");
    let py = std::env::var("MPR_PYTHON")
        .ok()
        .or_else(|| venv.exists().then(|| venv.to_str().unwrap().to_string()))
        .unwrap_or_else(|| "python3".into());
    let ok =
        std::process::Command::new(&py).args(["-c", "import numpy, gguf"]).output().is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    mpr_tests::cannot_run(&format!("{py} lacks numpy or gguf (pip install numpy gguf)"));
    None
}

#[test]
fn logits_match_an_independent_numpy_reference() {
    let (Some(model), Some(py)) = (model(), python()) else { return };
    let dir = scratch("numpy");
    let dump = dir.join("logits");
    let prompt = "The capital of France is";
    let out = mprun(
        &[
            "-np",
            "1",
            &llm(),
            "--model",
            &model,
            "--prompt",
            prompt,
            "--tokens",
            "1",
            "--dump-logits",
            dump.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ids = std::fs::read_to_string(format!("{}.tokens", dump.display())).unwrap();
    let reference = dir.join("reference");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference.py");
    let out = std::process::Command::new(&py)
        .args([script, &model, &ids, reference.to_str().unwrap()])
        .output()
        .expect("run the reference");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The token ids spell the prompt (decoded by the reference from the vocabulary).
    assert_eq!(text(&out.stdout), prompt);
    let (a, b) = (logits(&dump), logits(&reference));
    assert_eq!((a.len(), a[0].len()), (b.len(), b[0].len()));
    let worst = a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(worst <= 1e-3, "mpr-llm's logits differ from numpy's by up to {worst}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn chat_applies_the_template_and_keeps_the_conversation() {
    let Some(model) = model() else { return };
    let args = ["-np", "2", &llm(), "--model", &model, "--chat", "--tokens", "40"];
    let out = mprun(&[&args[..], &["--prompt", "What is the capital of France?"]].concat(), &[]);
    let so = text(&out.stdout);
    assert!(out.status.success() && so.contains("Paris"), "{so}{}", text(&out.stderr));
    // A conversation from stdin (mprun gives rank 0 its stdin): the second question only
    // makes sense after the first, so "Rome" shows the turns before stayed in the cache.
    let mut c = std::process::Command::new(mpr_tests::mprun_path());
    c.args(args).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"What is the capital of France?\nAnd of Italy?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    let replies: Vec<&str> = so.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(replies.len(), 2, "{so}");
    assert!(replies[0].contains("Paris") && replies[1].contains("Rome"), "{so}");
    assert_eq!(text(&out.stderr).matches("decode:").count(), 2, "{}", text(&out.stderr));
    chat_on_a_terminal(&args);
}

/// The conversation of `args` on a terminal (a pseudo-terminal that `script` holds, typed
/// into ahead): rank 0 prompts with "> " before each turn and the prompt shows before the
/// reply (mprun releases a line its rank pauses on); Ctrl-D ends the chat cleanly.
fn chat_on_a_terminal(args: &[&str]) {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        mpr_tests::cannot_run("no `script` (util-linux) to give the chat a terminal");
        return;
    }
    let marker = format!("tty-chat-{}", std::process::id());
    let mut cmd = vec![mpr_tests::mprun_path().to_str().unwrap().to_string()];
    cmd.extend(args.iter().map(|a| a.to_string()));
    cmd.extend(["--system".to_string(), marker.clone()]);
    let line = cmd.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
    let mut c = std::process::Command::new("script");
    c.args(["-qfec", &line, "/dev/null"]).stdin(std::process::Stdio::piped());
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    // A question, then Ctrl-D on an empty line: end of input for the chat.
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"What is the capital of France?\n\x04").unwrap();
    let out = child.wait_with_output().unwrap();
    let tty = text(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{tty}{}", text(&out.stderr));
    let (prompt, paris) = (tty.find("> "), tty.find("Paris"));
    assert!(prompt.is_some() && paris.is_some() && prompt < paris, "the prompt comes before the reply:\n{tty}");
    assert_eq!(tty.matches("> ").count(), 2, "a prompt before the turn and one before Ctrl-D:\n{tty}");
    assert!(tty.contains("> \npeak resident memory"), "Ctrl-D ends the prompt's line:\n{tty}");
    assert!(mpr_tests::processes_with(&marker).is_empty(), "{:?}", mpr_tests::processes_with(&marker));
}

/// GPT-2's printable stand-ins for bytes (a byte-level BPE vocabulary's first 256 tokens).
fn byte_chars() -> Vec<char> {
    let mut next = 256u32;
    (0..256u32)
        .map(|b| {
            if (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b) {
                char::from_u32(b).unwrap()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

/// A small Llama of random weights as a Hugging Face directory: `heads` query heads over
/// `kv` key/value heads of 8 dimensions, `layers` layers, a feed-forward width `ffn`,
/// tensors in `dtype` ("F32" or "BF16"), the output tied to the embedding if `tied`.
fn random_model(dir: &std::path::Path, heads: usize, kv: usize, layers: usize, ffn: usize, dtype: &str, tied: bool) {
    use serde_json::json;
    std::fs::create_dir_all(dir).unwrap();
    // The tokenizer: the 256 bytes, three merges, an end-of-text token.
    let chars = byte_chars();
    let mut vocab: serde_json::Map<String, serde_json::Value> =
        chars.iter().enumerate().map(|(i, c)| (c.to_string(), json!(i))).collect();
    for (i, t) in ["Ġt", "he", "Ġthe"].iter().enumerate() {
        vocab.insert(t.to_string(), json!(256 + i));
    }
    let n_vocab = 260;
    let tokenizer = json!({
        "added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "h e", ["Ġt", "he"]]},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), json!({"eos_token": "<|endoftext|>"}).to_string()).unwrap();
    let (hd, dim) = (8, 64);
    let config = json!({
        "model_type": "llama", "hidden_size": dim, "intermediate_size": ffn, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 256, "vocab_size": n_vocab, "hidden_act": "silu",
        "tie_word_embeddings": tied, "rope_scaling": null,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    // Weights uniform in +-sqrt(3/cols) (unit variance out of unit variance in), norms near 1.
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (heads * 1000 + kv * 100 + layers) as u64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, norm: bool| {
        let n: usize = shape.iter().product();
        let scale = (3.0 / *shape.last().unwrap() as f32).sqrt();
        let v = (0..n).map(|_| if norm { 1.0 + 0.2 * uniform() } else { scale * uniform() }).collect();
        tensors.push((name, shape, v));
    };
    add("model.embed_tokens.weight".into(), vec![n_vocab, dim], false);
    if !tied {
        add("lm_head.weight".into(), vec![n_vocab, dim], false);
    }
    add("model.norm.weight".into(), vec![dim], true);
    for l in 0..layers {
        let p = |s: &str| format!("model.layers.{l}.{s}.weight");
        add(p("input_layernorm"), vec![dim], true);
        add(p("post_attention_layernorm"), vec![dim], true);
        add(p("self_attn.q_proj"), vec![heads * hd, dim], false);
        add(p("self_attn.k_proj"), vec![kv * hd, dim], false);
        add(p("self_attn.v_proj"), vec![kv * hd, dim], false);
        add(p("self_attn.o_proj"), vec![dim, heads * hd], false);
        add(p("mlp.gate_proj"), vec![ffn, dim], false);
        add(p("mlp.up_proj"), vec![ffn, dim], false);
        add(p("mlp.down_proj"), vec![dim, ffn], false);
    }
    // safetensors: an 8-byte header length, the JSON header, the tensors' bytes.
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    for (name, shape, v) in tensors {
        let start = data.len();
        for x in v {
            match dtype {
                "F32" => data.extend(x.to_le_bytes()),
                _ => data.extend(half::bf16::from_f32(x).to_le_bytes()),
            }
        }
        header.insert(name, json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}));
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(data);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
}

fn worst_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!((a.len(), a[0].len()), (b.len(), b[0].len()));
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max)
}

#[test]
fn random_safetensors_models_shard_like_one_rank() {
    let dir = scratch("random");
    // (query heads, KV heads, layers, feed-forward width, type, tied): fewer KV heads than
    // 4 ranks (shared), one per query head split unevenly (6 over 4), a single KV head
    // (multi-query); a feed-forward width that is not whole blocks of 32.
    let models = [(8, 2, 4, 96, "F32", false), (6, 6, 3, 100, "BF16", false), (4, 1, 2, 128, "BF16", true)];
    for (heads, kv, layers, ffn, dtype, tied) in models {
        let model = dir.join(format!("h{heads}-kv{kv}-{dtype}"));
        random_model(&model, heads, kv, layers, ffn, dtype, tied);
        let mut one: Option<Vec<Vec<f32>>> = None;
        for (np, tp, pp) in
            [("1", "1", "1"), ("2", "2", "1"), ("3", "3", "1"), ("4", "4", "1"), ("2", "1", "2"), ("4", "2", "2")]
        {
            let what = format!("{heads} heads / {kv} KV heads, {dtype}: {np} ranks, tp {tp} x pp {pp}");
            let dump = dir.join(format!("logits-{heads}-{np}-{pp}"));
            let out = mprun(
                &[
                    "-np",
                    np,
                    &llm(),
                    "--model",
                    model.to_str().unwrap(),
                    "--prompt",
                    "the cat sat on the 12 mats",
                    "--tokens",
                    "4",
                    "--tp",
                    tp,
                    "--pp",
                    pp,
                    "--dump-logits",
                    dump.to_str().unwrap(),
                ],
                &[],
            );
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            // The merges in rank order ("the" is "t" "he", " the" one token), the digits apart.
            let ids = std::fs::read_to_string(format!("{}.tokens", dump.display())).unwrap();
            assert!(ids.starts_with("116,257,") && ids.contains(",258,") && ids.contains(",49,50,"), "{what}: {ids}");
            let l = logits(&dump);
            match &one {
                None => one = Some(l),
                Some(base) => {
                    let worst = worst_difference(base, &l);
                    assert!(worst <= 1e-4, "{what}: logits differ from 1 rank's by up to {worst}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_safetensors_directory_runs_like_the_gguf_it_came_from() {
    let (Some(model), Some(py)) = (model(), python()) else { return };
    let dir = scratch("hf");
    let hf = dir.join("smollm2-hf");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reference.py");
    let out = std::process::Command::new(&py)
        .args([script, "--to-hf", &model, hf.to_str().unwrap()])
        .output()
        .expect("run the converter");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = |m: &str, np: &str, dump: &std::path::Path| {
        let args = ["-np", np, &llm(), "--model", m, "--prompt", "The capital of France is", "--tokens", "8"];
        let out = mprun(&[&args[..], &["--dump-logits", dump.to_str().unwrap()]].concat(), &[]);
        assert!(out.status.success(), "{m}: {}", text(&out.stderr));
        (text(&out.stdout), std::fs::read_to_string(format!("{}.tokens", dump.display())).unwrap(), logits(dump))
    };
    let (text_gguf, ids_gguf, l_gguf) = run(&model, "1", &dir.join("gguf"));
    for np in ["1", "2"] {
        let (text_hf, ids_hf, l_hf) = run(hf.to_str().unwrap(), np, &dir.join(format!("hf{np}")));
        assert_eq!(ids_hf, ids_gguf, "tokenizer.json and the GGUF vocabulary tokenize alike");
        assert!(text_hf.starts_with(" Paris"), "{np} ranks: {text_hf:?}");
        let worst = worst_difference(&l_gguf, &l_hf);
        assert!(worst <= 1e-3, "{np} ranks: the directory's logits differ from the GGUF's by up to {worst}");
    }
    assert!(text_gguf.starts_with(" Paris"));
    // Its chat template, from tokenizer_config.json.
    let out = mprun(
        &["-np", "1", &llm(), "--model", hf.to_str().unwrap(), "--chat", "--prompt", "What is the capital of France?"],
        &[],
    );
    assert!(out.status.success() && text(&out.stdout).contains("Paris"), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_answers_plain_and_streaming_chat_completions() {
    use std::io::BufRead;
    let Some(model) = model() else { return };
    // A seed no other process has on its command line: the mark of this job's processes.
    let marker = format!("{}", 900_000_000 + std::process::id());
    let mut child = std::process::Command::new(mpr_tests::mprun_path())
        .args(["-np", "2", &llm(), "--model", &model, "--serve", "127.0.0.1:0", "--seed", &marker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let (mut line, mut before) = (String::new(), String::new());
    while !line.contains("serving http://") {
        before.push_str(&line);
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "mpr-llm ended before serving: {before}");
    }
    let url = line.trim().rsplit(' ').next().unwrap().to_string();
    // The rest of its stderr, drained (a full pipe would stop the server).
    let log = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let post = |body: serde_json::Value| match ureq::post(&url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
    {
        Ok(r) => (r.status(), r.header("Content-Type").unwrap_or("").to_string(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, String::new(), r.into_string().unwrap()),
        Err(e) => panic!("{url}: {e}"),
    };
    let question = serde_json::json!([{"role": "user", "content": "What is the capital of France?"}]);
    let (status, kind, body) = post(serde_json::json!({"messages": question, "max_tokens": 30}));
    assert_eq!((status, kind.as_str()), (200, "application/json"), "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let answer = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(answer.contains("Paris"), "{body}");
    assert_eq!(v["object"], "chat.completion");
    let usage = &v["usage"];
    assert!(
        usage["prompt_tokens"].as_u64().unwrap() > 7 && usage["completion_tokens"].as_u64().unwrap() <= 30,
        "{body}"
    );
    // Streaming: server-sent events whose deltas spell the same (greedy) answer, then [DONE].
    let (status, kind, body) = post(serde_json::json!({"messages": question, "max_tokens": 30, "stream": true}));
    assert_eq!((status, kind.as_str()), (200, "text/event-stream"), "{body}");
    let events: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<serde_json::Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.len() > 3, "{body}");
    let streamed: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(streamed, answer);
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks.last().unwrap()["choices"][0]["finish_reason"].is_string(), "{body}");
    // Bad requests: answered 400 with the reason; the server goes on.
    let (status, _, body) = post(serde_json::json!({"messages": []}));
    assert!(status == 400 && body.contains("must be a non-empty list"), "{status} {body}");
    let (status, _, body) = post(serde_json::json!({"messages": question, "max_tokens": 100_000}));
    assert!(status == 400 && body.contains("exceed the model's context"), "{status} {body}");
    let (status, _, body) = post(serde_json::json!({"messages": question, "max_tokens": 5}));
    assert_eq!(status, 200, "{body}");
    // Stopped as a user would: every process of the job gone.
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    let log = log.join().unwrap();
    assert_eq!(log.matches("decode:").count(), 3, "{log}");
    // No --tp or --pp: on one host, tensor parallelism over both ranks.
    assert!(before.contains("tensor parallel over 2 ranks in each of 1 pipeline stage(s)"), "{before}");
    assert!(mpr_tests::processes_with(&marker).is_empty(), "{:?}", mpr_tests::processes_with(&marker));
}

/// `--tokens` beyond the context, up to the largest number it takes, is the context error
/// (the sum of prompt and tokens wrapped around and let it through).
#[test]
fn tokens_beyond_the_context_are_refused_whatever_their_number() {
    let dir = scratch("huge-tokens");
    let model = dir.join("model");
    random_model(&model, 4, 1, 2, 64, "F32", true);
    for tokens in ["5000", "18446744073709551615"] {
        let out = mprun(
            &["-np", "2", &llm(), "--model", model.to_str().unwrap(), "--prompt", "the", "--tokens", tokens],
            &[],
        );
        let err = text(&out.stderr);
        assert!(!out.status.success(), "--tokens {tokens}: {err}");
        assert!(err.contains(&format!("+ {tokens} more exceed the model's context of")), "--tokens {tokens}: {err}");
        assert!(!err.contains("panicked"), "--tokens {tokens}: {err}");
    }
}
