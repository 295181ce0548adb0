//! MLX's JSON hostfile (what `mlx.distributed_config` writes and `mlx.launch` reads), so a
//! user of MLX can switch with the file they have:
//!
//! ```json
//! {
//!   "backend": "jaccl",
//!   "envs": ["MLX_METAL_FAST_SYNCH=1"],
//!   "hosts": [
//!     {"ssh": "mac1", "ips": ["192.168.1.10"], "rdma": [null, "rdma_en3", ["rdma_en4", "rdma_en5"]]},
//!     {"ssh": "mac2", "ips": ["192.168.1.11"], "rdma": ["rdma_en3", null, null]},
//!     {"ssh": "mac3", "ips": ["192.168.1.12"], "rdma": ["rdma_en1", null, null]}
//!   ]
//! }
//! ```
//!
//! Older files are the `hosts` array alone. Each host gets one slot (MLX runs a rank per
//! host); `rdma[j]` names the device (or, one per cable, the devices) through which the host
//! reaches host `j`, `null` where there is no cable (and for itself): it becomes the host's
//! per-peer devices, as `rdma=PEER:DEV+DEV` in mpr's hostfile. `envs` are set for every
//! rank (before `-x` and `--env`). `ips` are checked but not needed: mprun finds the address
//! each host reaches it at; `backend` is ignored (mpr picks the transport per pair). `ssh` may
//! be `user@host`, as MLX passes it to ssh: mprun logs in as that user, and the host part
//! names the host everywhere else.

use serde::Deserialize;

use crate::hosts::{check_device, Hostfile};

/// The whole file, in its object form (`{"hosts": [...]}`); the list alone is its other form.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    envs: Vec<String>,
    hosts: Vec<Host>,
    #[serde(default, rename = "backend")]
    _backend: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Host {
    ssh: String,
    #[serde(default)]
    ips: Vec<String>,
    /// Per host of the file: `null`, a device, or a list of devices (read by [`devices`]).
    #[serde(default)]
    rdma: Vec<serde_json::Value>,
}

/// The devices one `rdma` entry names: none (`null`, `[]`), one (`"rdma_en3"`) or several.
fn devices(v: serde_json::Value) -> Result<Vec<String>, String> {
    use serde_json::Value;
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(d) => Ok(vec![d]),
        Value::Array(list) => list
            .into_iter()
            .map(|d| match d {
                Value::String(d) => Ok(d),
                other => Err(format!("expected a device name, got {other}")),
            })
            .collect(),
        other => Err(format!("expected null, a device name or a list of them, got {other}")),
    }
}

/// Parses MLX's hostfile text; `file` names it in errors.
pub(crate) fn parse(file: &str, text: &str) -> Result<Hostfile, String> {
    let bad = |what: String| format!("{file}: {what}");
    let shape = |e: String| {
        bad(format!(
            "not an MLX hostfile ({e}); expected {{\"hosts\": [{{\"ssh\": HOST, \"ips\": [...], \"rdma\": [...]}}]}}"
        ))
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| shape(e.to_string()))?;
    let (envs, list) = if value.is_array() {
        (Vec::new(), serde_json::from_value::<Vec<Host>>(value).map_err(|e| shape(e.to_string()))?)
    } else {
        let f: File = serde_json::from_value(value).map_err(|e| shape(e.to_string()))?;
        (f.envs, f.hosts)
    };
    let mut env = Vec::new();
    for e in envs {
        match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => env.push((k.to_string(), v.to_string())),
            _ => return Err(bad(format!("envs: expected NAME=VALUE, got '{e}'"))),
        }
    }
    // `ssh` is what MLX passes to ssh: a host, or `user@host`.
    let mut names: Vec<String> = Vec::new();
    let mut logins = Vec::new();
    for (i, h) in list.iter().enumerate() {
        let (login, name) = crate::hosts::split_login(&h.ssh).map_err(|e| bad(format!("hosts[{i}]: ssh {e}")))?;
        names.push(name.to_string());
        logins.push(login);
    }
    let mut hosts = Vec::new();
    for (i, h) in list.into_iter().enumerate() {
        let name = &names[i];
        let mut spec = crate::hosts::parse_host_list(name)
            .ok()
            .filter(|v| v.len() == 1 && v[0].slots == 1 && v[0].name == *name)
            .map(|mut v| v.remove(0))
            .ok_or_else(|| bad(format!("hosts[{i}]: '{}' is not a host name or IPv4 address", h.ssh)))?;
        spec.login = logins[i].take();
        if names[..i].contains(name) {
            return Err(bad(format!("hosts[{i}]: host {name} is listed twice",)));
        }
        if let Some(ip) = h.ips.iter().find(|ip| ip.parse::<std::net::IpAddr>().is_err()) {
            return Err(bad(format!("hosts[{i}] ({}): '{ip}' in ips is not an IP address", h.ssh)));
        }
        if !h.rdma.is_empty() && h.rdma.len() != names.len() {
            return Err(bad(format!(
                "hosts[{i}] ({}): rdma lists {} entries, one per host is {}",
                h.ssh,
                h.rdma.len(),
                names.len()
            )));
        }
        for (j, devs) in h.rdma.into_iter().enumerate() {
            let devs = devices(devs).map_err(|e| bad(format!("hosts[{i}] ({}): rdma[{j}]: {e}", h.ssh)))?;
            if devs.is_empty() {
                continue;
            }
            if j == i {
                return Err(bad(format!("hosts[{i}] ({}): rdma names devices towards itself", h.ssh)));
            }
            let devs = devs
                .iter()
                .map(|d| check_device(d))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("hosts[{i}] ({}): {e}", h.ssh)))?;
            spec.rdma_peers.push((names[j].clone(), devs));
        }
        hosts.push(spec);
    }
    Ok(Hostfile { hosts, env })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4-Mac mesh as `mlx.distributed_config --backend jaccl` writes it (synthetic).
    const MESH: &str = r#"{
      "backend": "jaccl",
      "envs": ["MLX_METAL_FAST_SYNCH=1"],
      "hosts": [
        {"ssh": "m3-ultra-1", "ips": ["192.168.0.101"], "rdma": [null, "rdma_en3", "rdma_en4", "rdma_en5"]},
        {"ssh": "m3-ultra-2", "ips": ["192.168.0.102"], "rdma": ["rdma_en3", null, "rdma_en5", "rdma_en4"]},
        {"ssh": "m3-ultra-3", "ips": ["192.168.0.103"], "rdma": ["rdma_en4", "rdma_en5", null, "rdma_en3"]},
        {"ssh": "m3-ultra-4", "ips": ["192.168.0.104"], "rdma": ["rdma_en5", "rdma_en4", "rdma_en3", null]}
      ]
    }"#;

    #[test]
    fn a_jaccl_mesh_file_gives_every_host_its_devices_per_peer() {
        let f = parse("h.json", MESH).unwrap();
        assert_eq!(f.env, [("MLX_METAL_FAST_SYNCH".to_string(), "1".to_string())]);
        assert_eq!(f.hosts.len(), 4);
        assert!(f.hosts.iter().all(|h| h.slots == 1 && h.rdma_device.is_none()));
        let peers = |i: usize| crate::hosts::peers_env(&f.hosts[i].rdma_peers);
        assert_eq!(peers(0), "m3-ultra-2:rdma_en3,m3-ultra-3:rdma_en4,m3-ultra-4:rdma_en5");
        assert_eq!(peers(3), "m3-ultra-1:rdma_en5,m3-ultra-2:rdma_en4,m3-ultra-3:rdma_en3");
        crate::hosts::check_cables(&f.hosts).unwrap();
    }

    #[test]
    fn ssh_as_user_at_host_logs_in_as_that_user_and_names_the_host() {
        let text = r#"{"hosts": [{"ssh": "me@mac1", "ips": [], "rdma": [null, "rdma_en3"]},
                                 {"ssh": "mac2", "ips": [], "rdma": ["rdma_en4", null]}]}"#;
        let f = parse("h.json", text).unwrap();
        assert_eq!((f.hosts[0].name.as_str(), f.hosts[0].login.as_deref()), ("mac1", Some("me")));
        assert_eq!((f.hosts[1].name.as_str(), f.hosts[1].login.as_deref()), ("mac2", None));
        // Devices are named towards the host, not the login.
        assert_eq!(crate::hosts::peers_env(&f.hosts[1].rdma_peers), "mac1:rdma_en4");
        crate::hosts::check_cables(&f.hosts).unwrap();
        let bad = parse("h.json", r#"[{"ssh": "-oX=y@mac1"}]"#).unwrap_err();
        assert_eq!(bad, "h.json: hosts[0]: ssh '-oX=y@mac1': '-oX=y' is not a user name (expected USER@HOST)");
        let twice = parse("h.json", r#"[{"ssh": "a@mac1"}, {"ssh": "b@mac1"}]"#).unwrap_err();
        assert_eq!(twice, "h.json: hosts[1]: host mac1 is listed twice");
    }

    #[test]
    fn two_cables_per_pair_and_the_bare_host_list() {
        let two = r#"[{"ssh": "a", "ips": [], "rdma": [null, ["rdma_en3", "rdma_en4"]]},
                      {"ssh": "b", "rdma": [["rdma_en1", "rdma_en2"], null]}]"#;
        let f = parse("h.json", two).unwrap();
        assert_eq!(crate::hosts::peers_env(&f.hosts[0].rdma_peers), "b:rdma_en3+rdma_en4");
        assert!(f.env.is_empty());
        crate::hosts::check_cables(&f.hosts).unwrap();
        let ring = parse("h.json", r#"{"hosts": [{"ssh": "x", "ips": ["10.0.0.1"]}, {"ssh": "y"}]}"#).unwrap();
        assert!(ring.hosts.iter().all(|h| h.rdma_peers.is_empty()));
    }

    #[test]
    fn broken_files_get_clear_errors() {
        let cases = [
            (
                r#"{"hosts": [{"ssh": "a", "rdma": [null, "x"]}]}"#,
                "h.json: hosts[0] (a): rdma lists 2 entries, one per host is 1",
            ),
            (r#"{"hosts": [{"ssh": "a", "rdma": ["x"]}]}"#, "h.json: hosts[0] (a): rdma names devices towards itself"),
            (
                r#"{"hosts": [{"ssh": "a", "ips": ["nope"]}]}"#,
                "h.json: hosts[0] (a): 'nope' in ips is not an IP address",
            ),
            (r#"{"hosts": [{"ssh": "-oProxy"}]}"#, "h.json: hosts[0]: '-oProxy' is not a host name or IPv4 address"),
            (r#"{"hosts": [{"ssh": "a"}, {"ssh": "a"}]}"#, "h.json: hosts[1]: host a is listed twice"),
            (r#"{"envs": ["X"], "hosts": [{"ssh": "a"}]}"#, "h.json: envs: expected NAME=VALUE, got 'X'"),
            (
                r#"{"hosts": [{"ssh": "a", "rdma": [null, "b/c"]}, {"ssh": "b"}]}"#,
                "h.json: hosts[0] (a): 'b/c' is not an RDMA device name (such as mlx5_0 or rdma_en3)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse("h.json", text).err().as_deref(), Some(want), "{text}");
        }
        let e = parse("h.json", r#"{"hosts": [{"name": "a"}]}"#).unwrap_err();
        assert!(e.starts_with("h.json: not an MLX hostfile (unknown field `name`, expected one of `ssh`"), "{e}");
        // What is wrong is named in the file's terms, never serde's.
        for (text, want) in [
            (r#"{"host": []}"#, "missing field `hosts`"),
            (r#"[{"ips": []}]"#, "missing field `ssh`"),
            (r#"{"hosts": [{"ssh": 7}]}"#, "invalid type: integer `7`, expected a string"),
            (r#"{"hosts": 3}"#, "invalid type: integer `3`, expected a sequence"),
            ("{\"hosts\": [", "EOF while parsing"),
        ] {
            let e = parse("h.json", text).unwrap_err();
            assert!(e.contains(want) && !e.contains("untagged") && !e.contains("variant"), "{text}: {e}");
        }
        assert_eq!(
            parse("h.json", r#"[{"ssh": "a", "rdma": [null, 5]}, {"ssh": "b"}]"#).unwrap_err(),
            "h.json: hosts[0] (a): rdma[1]: expected null, a device name or a list of them, got 5"
        );
        // A cable named at one end only.
        let f = parse("h.json", r#"[{"ssh": "a", "rdma": [null, "x"]}, {"ssh": "b"}]"#).unwrap();
        let e = crate::hosts::check_cables(&f.hosts).unwrap_err();
        assert_eq!(
            e,
            "host a reaches b through 1 device(s) (x), but b names 0 towards a (each cable has a device at both ends)"
        );
    }
}
