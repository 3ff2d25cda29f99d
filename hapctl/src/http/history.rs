//! What happened: the apply history (one apply with its diff) and the proofs of cutovers
//! (`hapctl prove`'s journals in `[paths] journal_dir`), for people and the dashboard.

use std::path::Path;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::error::{ApiError, PathParam};
use super::ApiState;
use crate::edge::EdgeError;

/// Journals listed, newest first.
const PROOFS_LISTED: usize = 50;
/// A journal is a page of markdown; a bigger file is not one `hapctl prove` wrote.
const MAX_JOURNAL_BYTES: u64 = 4 << 20;

pub async fn list_applies(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let list = app.read(|edge| edge.apply_entries(100)).await?;
    Ok(Json(serde_json::to_value(list).unwrap_or_default()))
}

pub async fn get_apply(
    State(app): State<ApiState>,
    PathParam(id): PathParam,
) -> Result<Json<Value>, ApiError> {
    let n: i64 = id
        .parse()
        .map_err(|_| ApiError::invalid("id", format!("{id:?} is not an apply number")))?;
    let found = app.read(move |edge| edge.apply_entry(n)).await?;
    let entry = found.ok_or_else(|| ApiError::not_found(format!("no apply {n}")))?;
    Ok(Json(serde_json::to_value(entry).unwrap_or_default()))
}

/// A journal's file name as `hapctl prove` makes it (`prove-<UTC time>[-N].md`): nothing else
/// is read, so no path can lead out of the folder.
fn journal_name(name: &str) -> Option<&str> {
    let stem = name.strip_prefix("prove-")?.strip_suffix(".md")?;
    let ok = !stem.is_empty()
        && stem.len() <= 64
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    ok.then_some(name)
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> EdgeError {
    move |source| EdgeError::Io { context, source }
}

/// The journals, newest first: name, title (its first line: what was proved, PASSED or
/// FAILED), when it was written and its size.
fn proofs(dir: &Path) -> Result<Vec<Value>, EdgeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io_error(format!("cannot list {}", dir.display()))(e)),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(meta) = journal_name(&name).and_then(|_| entry.metadata().ok()) else {
            continue;
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        found.push((modified, name, meta.len()));
    }
    found.sort_by(|a, b| b.cmp(a));
    found.truncate(PROOFS_LISTED);
    Ok(found
        .into_iter()
        .map(|(modified, name, bytes)| {
            let text = read_journal(dir, &name).unwrap_or_default();
            let title = text.lines().next().unwrap_or("").trim_start_matches("# ");
            json!({"name": name, "title": title, "modified": modified, "bytes": bytes})
        })
        .collect())
}

fn read_journal(dir: &Path, name: &str) -> Result<String, EdgeError> {
    let path = dir.join(name);
    let what = format!("cannot read {}", path.display());
    let file = std::fs::File::open(&path).map_err(io_error(what.clone()))?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_JOURNAL_BYTES), &mut text)
        .map_err(io_error(what))?;
    Ok(text)
}

pub async fn list_proofs(State(app): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let list = app
        .read(|edge| proofs(&edge.settings.paths.journal_dir))
        .await?;
    Ok(Json(Value::Array(list)))
}

pub async fn get_proof(
    State(app): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, ApiError> {
    if journal_name(&name).is_none() {
        return Err(ApiError::invalid(
            "name",
            format!("{name:?} is not a journal of hapctl prove (prove-<time>.md)"),
        ));
    }
    let shown = name.clone();
    let text = app
        .read(move |edge| {
            let dir = &edge.settings.paths.journal_dir;
            match dir.join(&shown).is_file() {
                true => read_journal(dir, &shown).map(Some),
                false => Ok(None),
            }
        })
        .await?;
    let markdown = text.ok_or_else(|| ApiError::not_found(format!("no proof {name}")))?;
    Ok(Json(json!({"name": name, "markdown": markdown})))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_journal_names_are_read() {
        for ok in [
            "prove-20261201T210000.123Z.md",
            "prove-20261201T210000Z-2.md",
        ] {
            assert_eq!(super::journal_name(ok), Some(ok));
        }
        for bad in [
            "../hapctl.toml",
            "prove-.md",
            "prove-a/b.md",
            "prove-x.md.bak",
            "x.md",
            "prove-..%2f.md",
        ] {
            assert_eq!(super::journal_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn journals_are_listed_newest_first_with_their_verdict() {
        let dir = tempfile::tempdir().unwrap();
        assert!(super::proofs(&dir.path().join("absent"))
            .unwrap()
            .is_empty());
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("prove-1.md", "# Proof of a cutover: PASSED\n\nbody");
        write("notes.md", "# not a proof");
        let list = super::proofs(dir.path()).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["title"], "Proof of a cutover: PASSED");
        assert_eq!(list[0]["bytes"], 34);
    }
}
