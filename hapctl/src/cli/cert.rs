//! `hapctl cert request|import|ls|show|renew|rm`: TLS certificates.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Subcommand;

use hapctl::edge::{CertView, RenewOutcome};
use hapctl::fleet::certs::FleetCertStatus;
use hapctl::model::{CertName, Domain};
use hapctl::tls::InstallReport;

use super::{open, output, Failure, JsonFlag, JsonOut};

/// Largest PEM file read (the bundle parser refuses less than this anyway).
const MAX_PEM_FILE: u64 = 1024 * 1024;

#[derive(Subcommand)]
pub enum CertCommand {
    /// Order a certificate from the ACME CA and serve it (no reload).
    Request {
        /// The certificate's name, e.g. `shop.example.com` or `wildcard.example.com`.
        name: String,
        /// A host name it must cover; repeat for more (default: the host NAME stands for).
        #[arg(long = "name", value_name = "HOST")]
        names: Vec<String>,
        /// Prove control through DNS (needed for wildcards): runs `[acme] dns_hook`.
        #[arg(long)]
        dns_01: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Install a PEM bundle (leaf, chain, key) and serve it (no reload).
    Import {
        /// The certificate's name; `default` replaces the certificate for unknown names.
        name: String,
        /// The PEM file (`-` reads standard input).
        #[arg(long)]
        pem: PathBuf,
        /// A host name it must cover; repeat for more (default: the host NAME stands for).
        #[arg(long = "name", value_name = "HOST")]
        names: Vec<String>,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// List certificates: names, expiry, next renewal, last error, what each serves.
    Ls(JsonOut),
    /// One certificate.
    Show {
        name: String,
        #[command(flatten)]
        out: JsonOut,
    },
    /// Renew ACME certificates: NAME or every one (--all) that is due, or now with --force.
    Renew {
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        #[arg(long)]
        all: bool,
        /// Renew even when not due.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        out: JsonFlag,
    },
    /// Stop serving a certificate and delete it (its names fall back to other certificates or
    /// the default one).
    Rm {
        name: String,
        #[command(flatten)]
        out: JsonFlag,
    },
}

fn names(values: &[String]) -> Result<Vec<Domain>, Failure> {
    Ok(values
        .iter()
        .map(|v| v.parse())
        .collect::<Result<Vec<Domain>, _>>()?)
}

fn read_pem(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().take(MAX_PEM_FILE).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(MAX_PEM_FILE).read_to_end(&mut bytes))
    };
    read.map_err(|e| Failure::input(anyhow::anyhow!("cannot read {}: {e}", path.display())))?;
    Ok(bytes)
}

pub fn run(dir: &Path, cmd: CertCommand) -> Result<u8, Failure> {
    match cmd {
        CertCommand::Request {
            name,
            names: hosts,
            dns_01,
            out,
        } => {
            let (name, hosts): (CertName, _) = (name.parse()?, names(&hosts)?);
            let report = open(dir)?.request_certificate(&name, &hosts, dns_01)?;
            Ok(print_install(&report, out.json))
        }
        CertCommand::Import {
            name,
            pem,
            names: hosts,
            out,
        } => {
            let (name, hosts): (CertName, _) = (name.parse()?, names(&hosts)?);
            let bytes = read_pem(&pem)?;
            let report = open(dir)?.import_certificate(&name, &bytes, &hosts)?;
            Ok(print_install(&report, out.json))
        }
        CertCommand::Ls(out) => {
            let edge = open(dir)?;
            let fleet = edge.fleet_certificate_statuses()?;
            print_certs(&edge.certificates()?, out.json, fleet.as_ref());
            Ok(0)
        }
        CertCommand::Show { name, out } => {
            let view = open(dir)?.certificate(&name.parse()?)?;
            if out.json {
                output::print_json(&view);
            } else {
                print_certs(std::slice::from_ref(&view), false, None);
            }
            Ok(0)
        }
        CertCommand::Renew {
            name,
            all: _,
            force,
            out,
        } => {
            let mut edge = open(dir)?;
            let outcomes = match name {
                Some(n) => edge.renew_if_due(&n.parse()?, force)?.into_iter().collect(),
                None => edge.renew_due(force)?,
            };
            Ok(print_renewals(&outcomes, out.json))
        }
        CertCommand::Rm { name, out } => {
            let report = open(dir)?.remove_certificate(&name.parse()?)?;
            Ok(print_install(&report, out.json))
        }
    }
}

fn print_install(report: &InstallReport, json: bool) -> u8 {
    if json {
        output::print_json(report);
        return 0;
    }
    let how = match report.installed {
        hapctl::tls::Installed::Runtime => "through the runtime API, no reload".to_string(),
        hapctl::tls::Installed::Reload => format!(
            "with a checked reload (the runtime path failed: {})",
            report.runtime_error.as_deref().unwrap_or("?")
        ),
        hapctl::tls::Installed::NotRunning => "files written; HAProxy loads them at start".into(),
    };
    match &report.serial {
        Some(serial) => println!(
            "certificate {} (serial {serial}) installed {how}",
            report.name
        ),
        None => println!("certificate {} removed {how}", report.name),
    }
    if let Some(sni) = &report.handshake_sni {
        println!("  confirmed by a TLS handshake with SNI {sni}");
    }
    println!(
        "  {:.1} ms, {} haproxy -c, {} reload(s)",
        report.duration_ms, report.checks, report.reloads
    );
    0
}

fn print_certs(certs: &[CertView], json: bool, fleet: Option<&FleetStatuses>) {
    if json {
        let mut out = serde_json::json!({ "certificates": certs });
        if let Some(fleet) = fleet {
            out["fleet"] = serde_json::json!(fleet);
        }
        output::print_json(&out);
        return;
    }
    let now = hapctl::clock::unix_now();
    for c in certs {
        let r = &c.record;
        let days = (r.not_after - now) / 86_400;
        let serves = if r.name.is_default() {
            "every other name".to_string()
        } else if c.serves.is_empty() {
            "nothing (its names are served by other certificates)".to_string()
        } else {
            c.serves.join(" ")
        };
        println!(
            "{}\t{}\texpires {} ({days} days)\tserves {serves}",
            r.name,
            r.source,
            output::rfc3339(r.not_after)
        );
        if let Some(next) = r.next_renewal {
            println!("  next renewal {}", output::rfc3339(next));
        }
        if let Some(e) = &r.last_error {
            println!("  LAST RENEWAL FAILED ({} in a row): {e}", r.failures);
        }
        if let Some(status) = fleet.and_then(|f| f.get(r.name.as_str())) {
            print_fleet_status(status);
        }
    }
    // The fleet's certificates this edge does not serve (yet, or it refused them).
    let local: Vec<&str> = certs.iter().map(|c| c.record.name.as_str()).collect();
    for (name, status) in fleet.into_iter().flatten() {
        if !local.contains(&name.as_str()) && status.fleet_serial.is_some() {
            println!("{name}	in the fleet, NOT INSTALLED HERE");
            print_fleet_status(status);
        }
    }
}

type FleetStatuses = std::collections::BTreeMap<String, FleetCertStatus>;

fn print_fleet_status(s: &FleetCertStatus) {
    if let Some(serial) = &s.fleet_serial {
        let edges: Vec<String> = s
            .installed
            .iter()
            .map(|(edge, installed)| {
                let current = hapctl::tls::x509::serial_matches(installed, serial);
                format!("{edge}{}", if current { "" } else { " (older serial)" })
            })
            .collect();
        println!(
            "  fleet serial {serial}, installed on: {}",
            edges.join(", ")
        );
    }
    if let Some(lock) = &s.lock {
        println!(
            "  being ordered by {} since {}",
            lock.edge,
            output::rfc3339(lock.since)
        );
    }
    if let Some(last) = &s.last_order {
        match &last.error {
            None => println!(
                "  last order by {} at {}: issued",
                last.by,
                output::rfc3339(last.at)
            ),
            Some(e) => println!(
                "  LAST ORDER FAILED by {} at {} ({} in a row): {e}",
                last.by,
                output::rfc3339(last.at),
                last.failures
            ),
        }
    }
    if let Some(why) = &s.refused {
        println!("  REFUSED: {why}");
    }
}

fn print_renewals(outcomes: &[RenewOutcome], json: bool) -> u8 {
    let failed = outcomes.iter().any(|o| o.error.is_some());
    if json {
        output::print_json(&serde_json::json!({ "renewals": outcomes }));
    } else if outcomes.is_empty() {
        println!("no certificate is due");
    } else {
        for o in outcomes {
            match (&o.report, &o.error) {
                (Some(r), _) => println!(
                    "{}: renewed, serial {}",
                    o.name,
                    r.serial.as_deref().unwrap_or("?")
                ),
                (None, Some(e)) => eprintln!(
                    "{}: renewal FAILED, still serving the current certificate: {e}",
                    o.name
                ),
                (None, None) => {}
            }
        }
    }
    u8::from(failed)
}
