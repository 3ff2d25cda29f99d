//! Certificates in the running worker, through the runtime API: no reload.
//!
//! Commands go to the worker's own `stats socket` (the admin socket), which follows the
//! current worker across reloads. Like maps, runtime certificates live in memory only: the
//! caller writes the PEM file and the crt-list first, so a reload loads the same thing.

use super::runtime::RuntimeError;
use super::socket::CliSocket;

/// What `show ssl cert FILE` says about a loaded certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedCert {
    /// Uppercase hex, no colons (OpenSSL's form: no leading zero bytes).
    pub serial: String,
    /// As HAProxy prints it, e.g. `Dec 31 08:34:22 2026 GMT`.
    pub not_after: String,
}

/// The certificate store and crt-lists of the running worker.
pub struct RuntimeCerts {
    socket: CliSocket,
}

impl RuntimeCerts {
    pub fn new(admin_socket: CliSocket) -> RuntimeCerts {
        RuntimeCerts {
            socket: admin_socket,
        }
    }

    fn run(&self, command: &str) -> Result<String, RuntimeError> {
        Ok(self.socket.command(command)?)
    }

    /// Runs a command whose answer must contain `success` (HAProxy's words vary by command).
    fn expect(&self, command: &str, success: &str) -> Result<String, RuntimeError> {
        let answer = self.run(command)?;
        if answer.contains(success) {
            Ok(answer)
        } else if answer.trim().is_empty() {
            Err(RuntimeError::NoAnswer {
                command: first_line(command),
            })
        } else {
            Err(RuntimeError::Refused {
                command: first_line(command),
                answer: answer.trim().to_string(),
            })
        }
    }

    /// The loaded certificate `file`, or `None` when the worker does not know it.
    pub fn show(&self, file: &str) -> Result<Option<LoadedCert>, RuntimeError> {
        let answer = self.run(&format!("show ssl cert {file}"))?;
        Ok(parse_show_cert(&answer))
    }

    /// The file of an uncommitted transaction (a change killed half-way), if any.
    fn pending_transaction(&self) -> Result<Option<String>, RuntimeError> {
        let answer = self.run("show ssl cert")?;
        Ok(answer
            .lines()
            .find_map(|l| l.strip_prefix('*'))
            .map(|f| f.trim().to_string()))
    }

    /// Loads `pem` (chain then key) as `file`: replaced in place when the worker has it (every
    /// SNI entry using it switches at commit), else created and added to `crt_list` with
    /// `filters` (its SNI names). New handshakes get it at once; open connections keep theirs.
    pub fn install(
        &self,
        file: &str,
        pem: &str,
        crt_list: &str,
        filters: &[String],
    ) -> Result<(), RuntimeError> {
        // One transaction at a time in a worker: finish off one a killed change left.
        if let Some(pending) = self.pending_transaction()? {
            self.run(&format!("abort ssl cert {pending}"))?;
        }
        let known = self.show(file)?.is_some();
        if !known {
            self.expect(
                &format!("new ssl cert {file}"),
                "New empty certificate store",
            )?;
        }
        // The payload ends at the first empty line: the PEM must not contain one.
        let body: String = pem
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        let set = self.expect(&format!("set ssl cert {file} <<\n{body}"), "Transaction");
        if let Err(e) = set {
            if !known {
                let _ = self.run(&format!("del ssl cert {file}"));
            }
            return Err(e);
        }
        if let Err(e) = self.expect(&format!("commit ssl cert {file}"), "Success") {
            let _ = self.run(&format!("abort ssl cert {file}"));
            return Err(e);
        }
        if !self.listed_in(crt_list, file)? {
            self.add_line(crt_list, file, filters)?;
        }
        Ok(())
    }

    /// Adds one crt-list line for `file` (already loaded).
    pub fn add_line(
        &self,
        crt_list: &str,
        file: &str,
        filters: &[String],
    ) -> Result<(), RuntimeError> {
        let line = std::iter::once(file.to_string())
            .chain(filters.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        self.expect(
            &format!("add ssl crt-list {crt_list} <<\n{line}\n"),
            "Success",
        )?;
        Ok(())
    }

    /// Removes `file` from `crt_list` (every line naming it).
    pub fn remove_line(&self, crt_list: &str, file: &str) -> Result<(), RuntimeError> {
        self.expect(&format!("del ssl crt-list {crt_list} {file}"), "deleted")?;
        Ok(())
    }

    /// Unloads `file`: off the crt-list first (its handshakes fall back to other entries or
    /// the default certificate), then out of the store.
    pub fn remove(&self, crt_list: &str, file: &str) -> Result<(), RuntimeError> {
        if self.listed_in(crt_list, file)? {
            self.remove_line(crt_list, file)?;
        }
        if self.show(file)?.is_some() {
            self.expect(&format!("del ssl cert {file}"), "deleted")?;
        }
        Ok(())
    }

    /// The lines of `crt_list` as the worker holds them: file and SNI filters.
    pub fn lines(&self, crt_list: &str) -> Result<Vec<(String, Vec<String>)>, RuntimeError> {
        let answer = self.run(&format!("show ssl crt-list {crt_list}"))?;
        if !answer.starts_with('#') {
            return Err(RuntimeError::Refused {
                command: format!("show ssl crt-list {crt_list}"),
                answer: answer.trim().to_string(),
            });
        }
        Ok(parse_crt_list(&answer))
    }

    fn listed_in(&self, crt_list: &str, file: &str) -> Result<bool, RuntimeError> {
        Ok(self.lines(crt_list)?.iter().any(|(f, _)| f == file))
    }
}

fn first_line(command: &str) -> String {
    command.lines().next().unwrap_or_default().to_string()
}

/// `Serial:` and `notAfter:` of a `show ssl cert FILE` answer; `None` for an unknown file.
pub fn parse_show_cert(answer: &str) -> Option<LoadedCert> {
    let field = |name: &str| {
        answer
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    Some(LoadedCert {
        serial: field("Serial:")?,
        not_after: field("notAfter:")?,
    })
}

/// The lines of a `show ssl crt-list L` answer (`# L` then `FILE [opts] FILTERS...`).
fn parse_crt_list(answer: &str) -> Vec<(String, Vec<String>)> {
    answer
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let file = words.next()?.to_string();
            let mut filters = Vec::new();
            let mut in_options = false;
            for w in words {
                if w.starts_with('[') {
                    in_options = true;
                }
                if !in_options {
                    filters.push(w.to_string());
                }
                if w.ends_with(']') {
                    in_options = false;
                }
            }
            Some((file, filters))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_cert_answers_parse() {
        let answer = "Filename: /c/shop.pem\nStatus: Used\nSerial: 723DBC8C\nnotBefore: Dec  1 08:34:22 2026 GMT\nnotAfter: Dec 31 08:34:22 2026 GMT\n";
        assert_eq!(
            parse_show_cert(answer),
            Some(LoadedCert {
                serial: "723DBC8C".into(),
                not_after: "Dec 31 08:34:22 2026 GMT".into()
            })
        );
        assert_eq!(parse_show_cert("Can't display the certificate\n"), None);
    }

    #[test]
    fn crt_list_answers_parse() {
        let answer =
            "# /c/crt-list\n/c/default.pem\n/c/shop.pem [alpn h2,http/1.1] shop.test *.shop.test\n";
        assert_eq!(
            parse_crt_list(answer),
            vec![
                ("/c/default.pem".to_string(), vec![]),
                (
                    "/c/shop.pem".to_string(),
                    vec!["shop.test".to_string(), "*.shop.test".to_string()]
                ),
            ]
        );
    }
}
