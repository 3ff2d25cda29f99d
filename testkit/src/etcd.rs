//! A real etcd cluster on loopback ports in a temp dir (Debian 13's etcd 3.5, fetched by
//! `scripts/ensure-etcd.sh`): members can be killed, restarted, stopped all at once; every
//! member is killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{describe, free_port, run_bounded};

/// Where `scripts/ensure-etcd.sh` puts etcd when `HAPCTL_ETCD_BIN` is not set.
const CACHED: &str = "/var/cache/hapctl-tests/etcd-3.5/usr/bin";

pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    /// Clients speak TLS and must show a certificate of the test CA.
    tls: Option<TlsFiles>,
}

/// The files of a TLS cluster, in its temp dir.
#[derive(Clone)]
pub struct TlsFiles {
    /// The root clients trust.
    pub ca: PathBuf,
    /// A client certificate (clientAuth) and its key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

fn bin(name: &str, env: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CACHED).join(name));
    assert!(
        path.exists(),
        "{} is missing: run scripts/ensure-etcd.sh (scripts/test.sh does)",
        path.display()
    );
    path
}

impl EtcdCluster {
    /// `n` members, healthy with a leader.
    pub fn start(n: usize) -> EtcdCluster {
        EtcdCluster::start_with(n, None)
    }

    /// `n` members whose clients speak TLS with certificates of `ca` on both sides.
    pub fn start_tls(n: usize, ca: &crate::pki::TestCa) -> EtcdCluster {
        EtcdCluster::start_with(n, Some(ca))
    }

    fn start_with(n: usize, ca: Option<&crate::pki::TestCa>) -> EtcdCluster {
        let mut ports = Vec::new();
        while ports.len() < 2 * n {
            let p = free_port();
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: ports[2 * i],
                peer: ports[2 * i + 1],
                child: None,
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let tls = ca.map(|ca| write_tls(dir.path(), ca));
        let mut cluster = EtcdCluster { dir, members, tls };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.wait_healthy();
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        let client = format!("{}://127.0.0.1:{}", self.scheme(), m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let mut cmd = Command::new(bin("etcd", "HAPCTL_ETCD_BIN"));
        if let Some(t) = &self.tls {
            cmd.arg("--cert-file").arg(&t.server_cert);
            cmd.arg("--key-file").arg(&t.server_key);
            cmd.arg("--trusted-ca-file").arg(&t.ca);
            cmd.arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", &m.name, "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "hapctl-test",
            ])
            // Fast elections, so a killed leader is replaced within a second or two.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.members[i].child = Some(child);
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("{}://127.0.0.1:{}", self.scheme(), m.client))
            .collect()
    }

    /// The TLS files of a [`EtcdCluster::start_tls`] cluster.
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// `[fleet] endpoints = …` for hapctl.toml.
    pub fn endpoints_toml(&self) -> String {
        let quoted: Vec<String> = self.endpoints().iter().map(|e| format!("{e:?}")).collect();
        format!("[{}]", quoted.join(", "))
    }

    /// SIGKILL of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data (after [`EtcdCluster::kill`]).
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} runs");
        self.spawn(i);
    }

    /// Every member killed: etcd is down.
    pub fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }

    /// Every member started again on its data, healthy.
    pub fn start_all(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.spawn(i);
            }
        }
        self.wait_healthy();
    }

    /// `etcdctl snapshot save` of the cluster into `path`.
    pub fn snapshot(&self, path: &std::path::Path) {
        let leader = self.members[self.leader()].client;
        let out = self.etcdctl_at(leader, &["snapshot", "save", &path.display().to_string()]);
        assert!(out.status.success(), "snapshot save: {}", describe(&out));
    }

    /// Every member stopped, its data replaced by `snapshot` (`etcdutl snapshot restore`, as
    /// an operator restores a backup), and started again: the cluster's revision goes back to
    /// the snapshot's.
    pub fn restore(&mut self, snapshot: &std::path::Path) {
        self.stop_all();
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        for m in &self.members {
            let data = self.dir.path().join(&m.name);
            std::fs::remove_dir_all(&data).unwrap();
            let mut cmd = Command::new(bin("etcdutl", "HAPCTL_ETCDUTL_BIN"));
            cmd.args(["snapshot", "restore"])
                .arg(snapshot)
                .arg("--data-dir")
                .arg(&data)
                .args(["--name", &m.name, "--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-token", "hapctl-test"])
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                    m.peer
                ));
            let out = run_bounded(cmd, Duration::from_secs(30));
            assert!(out.status.success(), "snapshot restore: {}", describe(&out));
        }
        self.start_all();
    }

    /// The index of the member that leads now.
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for (i, m) in self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.child.is_some())
            {
                let out = self.etcdctl_at(m.client, &["endpoint", "status", "--write-out=json"]);
                let text = String::from_utf8_lossy(&out.stdout);
                let status: serde_json::Value = match serde_json::from_str(&text) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                let s = &status[0]["Status"];
                if s["leader"].is_u64() && s["leader"] == s["header"]["member_id"] {
                    return i;
                }
            }
            assert!(Instant::now() < deadline, "no etcd leader within 20 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every running member answers healthy.
    pub fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.etcdctl(&["endpoint", "health", "--cluster"]);
            if out.status.success() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "etcd not healthy within 30 s: {}\n{}",
                    describe(&out),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcdctl` against the running members.
    pub fn etcdctl(&self, args: &[&str]) -> std::process::Output {
        let ports: Vec<u16> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| m.client)
            .collect();
        self.etcdctl_on(&ports, "5s", args)
    }

    fn etcdctl_at(&self, port: u16, args: &[&str]) -> std::process::Output {
        self.etcdctl_on(&[port], "2s", args)
    }

    fn etcdctl_on(&self, ports: &[u16], timeout: &str, args: &[&str]) -> std::process::Output {
        let endpoints: Vec<String> = ports
            .iter()
            .map(|p| format!("{}://127.0.0.1:{p}", self.scheme()))
            .collect();
        let mut cmd = Command::new(bin("etcdctl", "HAPCTL_ETCDCTL_BIN"));
        cmd.arg(format!("--endpoints={}", endpoints.join(",")))
            .arg(format!("--command-timeout={timeout}"))
            .arg("--dial-timeout=2s");
        if let Some(t) = &self.tls {
            cmd.arg("--cacert").arg(&t.ca);
            cmd.arg("--cert").arg(&t.client_cert);
            cmd.arg("--key").arg(&t.client_key);
        }
        cmd.args(args);
        run_bounded(cmd, Duration::from_secs(15))
    }

    /// `etcdctl put KEY VALUE`, which must succeed.
    pub fn put(&self, key: &str, value: &str) {
        let out = self.etcdctl(&["put", key, value]);
        assert!(out.status.success(), "etcdctl put: {}", describe(&out));
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.etcdctl(&["get", key, "--print-value-only"]);
        assert!(out.status.success(), "etcdctl get: {}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        (!text.is_empty()).then_some(text)
    }

    /// Every member's log, for a failing test's message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                    .unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {}\n{}",
                    m.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A server certificate for 127.0.0.1 (with its chain), a client certificate, and the root.
fn write_tls(dir: &std::path::Path, ca: &crate::pki::TestCa) -> TlsFiles {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let server = ca.leaf(&["127.0.0.1"]);
    let client = ca.client_leaf("hapctl");
    TlsFiles {
        ca: write("ca.pem", &ca.root_pem()),
        client_cert: write(
            "client.pem",
            &format!("{}{}", client.cert_pem, ca.intermediate_pem),
        ),
        client_key: write("client-key.pem", &client.key_pem),
        server_cert: write(
            "server.pem",
            &format!("{}{}", server.cert_pem, ca.intermediate_pem),
        ),
        server_key: write("server-key.pem", &server.key_pem),
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
