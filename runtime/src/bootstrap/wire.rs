//! The PMI-1 wire protocol: one command per line, `cmd=NAME key=value ...\n`.
//!
//! This is the text protocol MPICH's PMI-1 clients speak to a process manager (hydra's
//! `PMI_FD` mode). mpr's ranks speak it to `mprun`, and `mprun` serves it, so both sides share
//! this codec. Values cannot contain spaces or newlines; callers encode binary data first.

use std::fmt::Write as _;

/// One PMI-1 command line: its `cmd` and its other `key=value` pairs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The value of the `cmd=` field.
    pub cmd: String,
    /// The remaining fields, in the order they appeared.
    pub fields: Vec<(String, String)>,
}

/// A line that is not a PMI-1 command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed PMI command: {}", self.0)
    }
}

impl std::error::Error for ParseError {}

impl Command {
    /// A command with no fields yet.
    pub fn new(cmd: &str) -> Self {
        Command { cmd: cmd.to_string(), fields: Vec::new() }
    }

    /// Adds a field (builder style).
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of field `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Parses one line (with or without its trailing newline).
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let mut cmd = None;
        let mut fields = Vec::new();
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let (k, v) = word.split_once('=').ok_or_else(|| ParseError(line.to_string()))?;
            if k.is_empty() {
                return Err(ParseError(line.to_string()));
            }
            if k == "cmd" && cmd.is_none() {
                cmd = Some(v.to_string());
            } else {
                fields.push((k.to_string(), v.to_string()));
            }
        }
        let cmd = cmd.ok_or_else(|| ParseError(line.to_string()))?;
        Ok(Command { cmd, fields })
    }

    /// Encodes the command as one line, newline included.
    pub fn encode(&self) -> String {
        let mut s = format!("cmd={}", self.cmd);
        for (k, v) in &self.fields {
            let _ = write!(s, " {k}={v}");
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let c = Command::new("put").with("kvsname", "job1").with("key", "card-0").with("value", "a:b;c");
        let line = c.encode();
        assert_eq!(line, "cmd=put kvsname=job1 key=card-0 value=a:b;c\n");
        assert_eq!(Command::parse(&line).unwrap(), c);
        assert_eq!(c.get("key"), Some("card-0"));
        assert_eq!(c.get("nope"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Command::parse("hello world").is_err());
        assert!(Command::parse("key=1").is_err());
        assert!(Command::parse("cmd=x =3").is_err());
        assert_eq!(Command::parse("cmd=barrier_in").unwrap().cmd, "barrier_in");
    }
}
