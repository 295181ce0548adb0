//! `--serve ADDR`: an OpenAI-compatible `/v1/chat/completions` on rank 0, as exo offers.
//! Rank 0 takes a request, answers a malformed one itself, else renders the conversation
//! with the model's chat template and broadcasts the job; every rank then runs the turn (a
//! fresh KV cache each time), rank 0 sending the reply whole or as server-sent events.
//! Requests are served one at a time; others wait in the listener's queue.

use std::io::Write;

use serde_json::{json, Value};

use crate::{agree, model, tokenizer, Args, Chat, Failure, Turn};

/// The arguments of a request: `a` with what the request sets (max_tokens, temperature,
/// top_p, top_k, seed), or why they are wrong. Rank 0 checks them with it; every rank then
/// takes the same request through it.
fn request_args(v: &Value, a: &Args) -> Result<Args, String> {
    let mut args = a.clone();
    let num = |key: &str| v.get(key).filter(|x| !x.is_null());
    if let Some(n) = num("max_completion_tokens").or(num("max_tokens")) {
        args.tokens = n.as_u64().filter(|&n| n > 0).ok_or("max_tokens must be a positive whole number")? as usize;
    }
    if let Some(t) = num("temperature") {
        args.temperature = t.as_f64().filter(|t| (0.0..=2.0).contains(t)).ok_or("temperature must be in 0..2")? as f32;
    }
    if let Some(p) = num("top_p") {
        args.top_p = p.as_f64().filter(|p| *p > 0.0 && *p <= 1.0).ok_or("top_p must be in (0, 1]")? as f32;
    }
    if let Some(k) = num("top_k") {
        args.top_k = k.as_u64().ok_or("top_k must be a whole number")? as usize;
    }
    if let Some(s) = num("seed") {
        args.seed = s.as_u64().ok_or("seed must be a whole number")?;
    }
    Ok(args)
}

/// The job in a request's body (the conversation rendered by the chat template, and the
/// request) and whether to stream, or why it is not one (a 400 for the client).
fn parse(
    body: &str,
    a: &Args,
    chat: &mut Chat,
    tok: &tokenizer::Tokenizer,
    ctx: usize,
) -> Result<(Value, bool), String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let msgs = v["messages"].as_array().filter(|m| !m.is_empty()).ok_or("\"messages\" must be a non-empty list")?;
    chat.messages.clear();
    for m in msgs {
        let (Some(role), Some(content)) = (m["role"].as_str(), m["content"].as_str()) else {
            return Err(format!("a message needs a \"role\" and a string \"content\": {m}"));
        };
        chat.messages.push((role.to_string(), content.to_string()));
    }
    let text = chat.render(true, tok)?;
    let args = request_args(&v, a)?;
    let prompt = tok.encode(&text).len();
    if prompt.saturating_add(args.tokens) > ctx {
        return Err(format!(
            "{prompt} prompt tokens + {} to generate exceed the model's context of {ctx}",
            args.tokens
        ));
    }
    let stream = v["stream"].as_bool().unwrap_or(false);
    Ok((json!({"text": text, "request": v}), stream))
}

fn json_response(status: u16, v: &Value) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let header = tiny_http::Header::from_bytes("Content-Type", "application/json").expect("a header");
    tiny_http::Response::from_string(v.to_string()).with_status_code(status).with_header(header)
}

fn error(status: u16, message: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    json_response(status, &json!({"error": {"message": message, "type": "invalid_request_error"}}))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn serve(
    world: &mpr::Comm,
    group: &mpr::Comm,
    stage: (usize, usize),
    m: &model::Model<'_>,
    tok: &tokenizer::Tokenizer,
    template: Option<String>,
    addr: &str,
    a: &Args,
) -> Result<(), Failure> {
    let me = world.rank();
    let server = if me == 0 {
        match (tiny_http::Server::http(addr), &template) {
            (Err(e), _) => Err(format!("--serve {addr}: {e}")),
            (Ok(_), None) => Err("--serve: the model has no chat template".to_string()),
            (Ok(s), Some(_)) => Ok(Some(s)),
        }
    } else {
        Ok(None)
    };
    let server = agree(world, server)?;
    if let Some(s) = &server {
        eprintln!("mpr-llm: serving http://{}/v1/chat/completions", s.server_addr());
    }
    let name = a.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut chat = Chat { template, messages: Vec::new(), cached: String::new() };
    let mut count = 0u64;
    loop {
        // Rank 0: the next request that holds a job; everyone: the job.
        let mut pending = None;
        let mut bytes = Vec::new();
        if let Some(s) = &server {
            while pending.is_none() {
                let Ok(mut req) = s.recv() else { continue };
                let path = req.url().split('?').next().unwrap_or("").to_string();
                let reply = match (req.method(), path.as_str()) {
                    (tiny_http::Method::Get, "/v1/models") => Some(json_response(
                        200,
                        &json!({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "mpr"}]}),
                    )),
                    (tiny_http::Method::Post, "/v1/chat/completions") => {
                        let mut body = String::new();
                        match std::io::Read::read_to_string(req.as_reader(), &mut body) {
                            Err(e) => Some(error(400, &format!("the body: {e}"))),
                            Ok(_) => match parse(&body, a, &mut chat, tok, m.cfg.ctx) {
                                Err(e) => Some(error(400, &e)),
                                Ok((job, stream)) => {
                                    bytes = serde_json::to_vec(&job).expect("JSON");
                                    pending = Some((req, stream));
                                    continue;
                                }
                            },
                        }
                    }
                    _ => Some(error(404, &format!("no {} {path} here; POST /v1/chat/completions", req.method()))),
                };
                if let Some(r) = reply {
                    let _ = req.respond(r);
                }
            }
        }
        let mut len = [bytes.len() as u64];
        world.bcast(&mut len, 0)?;
        bytes.resize(len[0] as usize, 0);
        world.bcast(&mut bytes, 0)?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| Failure::Say(format!("a job: {e}")))?;
        let args = request_args(&v["request"], a).map_err(Failure::Say)?;
        let text = v["text"].as_str().unwrap_or_default().to_string();
        count += 1;
        let id = format!("chatcmpl-{}-{count}", std::process::id());
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut t = Turn::new(m, tok, world, group, stage, &args);
        match pending {
            Some((req, true)) => {
                // Server-sent events: written into a pipe that a thread sends on as the
                // chunks of a response of unknown length.
                let (r, mut w) = std::io::pipe().map_err(|e| Failure::Say(format!("a pipe: {e}")))?;
                let headers = ["Content-Type: text/event-stream", "Cache-Control: no-cache"]
                    .iter()
                    .map(|h| h.parse::<tiny_http::Header>().expect("a header"))
                    .collect();
                let sender = std::thread::spawn(move || {
                    let _ = req.respond(tiny_http::Response::new(200.into(), headers, r, None, None));
                });
                let chunk = |delta: Value, finish: Value| {
                    let c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": name,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                    format!("data: {c}\n\n")
                };
                let _ = w.write_all(chunk(json!({"role": "assistant", "content": ""}), Value::Null).as_bytes());
                let reply = t.run(&text, None, &mut |piece| {
                    if !piece.is_empty() {
                        let _ = w.write_all(chunk(json!({"content": piece}), Value::Null).as_bytes());
                    }
                })?;
                let finish = if reply.ended { "stop" } else { "length" };
                let _ = w.write_all(chunk(json!({}), json!(finish)).as_bytes());
                let _ = w.write_all(b"data: [DONE]\n\n");
                drop(w);
                let _ = sender.join();
            }
            Some((req, false)) => {
                let reply = t.run(&text, None, &mut |_| {})?;
                let _ = req.respond(json_response(
                    200,
                    &json!({
                        "id": id, "object": "chat.completion", "created": created, "model": name,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                            "finish_reason": if reply.ended { "stop" } else { "length" }}],
                        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.tokens,
                            "total_tokens": reply.prompt_tokens + reply.tokens},
                    }),
                ));
            }
            None => {
                t.run(&text, None, &mut |_| {})?;
            }
        }
    }
}
