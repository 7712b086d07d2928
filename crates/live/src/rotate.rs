//! Files that rotate: a capture or records file written as numbered pieces, each cut before
//! it would pass a size or once it has been open a given time, the oldest deleted beyond a
//! number kept, so the disk a relay uses is bounded however long it runs (docs/trace-v2.md,
//! "Pieces").
//!
//! `--capture cap.jsonl` writes `cap.00000000.jsonl`, `cap.00000001.jsonl`, …: the number is
//! fixed-width, so name order (how `windowtap replay DIR` and a shell glob list them) is
//! piece order. Cuts fall only between lines, so every piece is whole JSON Lines.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// When a piece is cut and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A piece is cut before a line that would take it past this many bytes (a piece whose
    /// first line alone is longer holds that one line).
    pub max_bytes: Option<u64>,
    /// A piece is cut before the first line written once it has been open this long (an
    /// idle relay writes nothing, so it cuts nothing either).
    pub max_age: Option<Duration>,
    /// Pieces kept, the one being written included; older ones are deleted.
    pub keep: usize,
}

/// How many digits a piece number has.
const DIGITS: usize = 8;

/// The path of piece `seq` of `base`: its number before the extension
/// (`cap.jsonl` → `cap.00000003.jsonl`; `cap` → `cap.00000003`).
pub fn piece_path(base: &Path, seq: u64) -> PathBuf {
    let stem = base.file_stem().unwrap_or_default().to_string_lossy();
    let name = match base.extension() {
        Some(ext) => format!("{stem}.{seq:0DIGITS$}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{seq:0DIGITS$}"),
    };
    base.with_file_name(name)
}

/// How the pieces of `base` are named, for a person: `cap.*.jsonl`.
pub fn pieces_pattern(base: &Path) -> PathBuf {
    let one = piece_path(base, 0);
    let name = one.file_name().unwrap_or_default().to_string_lossy();
    base.with_file_name(name.replacen(&"0".repeat(DIGITS), "*", 1))
}

/// The pieces of one file, written one after the other.
pub struct Pieces {
    base: PathBuf,
    limits: Limits,
    seq: u64,
    file: BufWriter<File>,
    /// Bytes in the current piece.
    bytes: u64,
    /// Where the current piece's body starts (after a capture's header): a piece is never cut
    /// before it holds a line of its own.
    body_from: u64,
    opened: Instant,
    /// Records files: cut by [`Write::write`] itself, at the start of a line.
    auto: bool,
    at_line_start: bool,
}

impl Pieces {
    /// Starts piece 0 of `base`. Pieces of an earlier run at the same path are deleted first,
    /// as a plain `--capture FILE` truncates FILE: they would otherwise sit outside the bound.
    /// `auto`: cut at line starts as lines are written (records); otherwise the writer asks
    /// [`Pieces::due`] and calls [`Pieces::cut`] itself (a capture, which starts each piece
    /// with a header of its own).
    pub fn create(base: &Path, limits: Limits, auto: bool) -> io::Result<Pieces> {
        if limits.keep == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one piece must be kept",
            ));
        }
        remove_old_pieces(base)?;
        Ok(Pieces {
            base: base.to_path_buf(),
            limits,
            seq: 0,
            file: BufWriter::new(File::create(piece_path(base, 0))?),
            bytes: 0,
            body_from: 0,
            opened: Instant::now(),
            auto,
            at_line_start: true,
        })
    }

    /// The number of the piece being written.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// What is written from here on is the piece's body (its header is before).
    pub fn mark_body(&mut self) {
        self.body_from = self.bytes;
    }

    /// Whether a line of `len` bytes must go to a new piece.
    pub fn due(&self, len: usize) -> bool {
        if self.bytes <= self.body_from {
            return false;
        }
        self.limits
            .max_bytes
            .is_some_and(|max| self.bytes + len as u64 > max)
            || self
                .limits
                .max_age
                .is_some_and(|age| self.opened.elapsed() >= age)
    }

    /// Ends the current piece (flushed and fsynced: it will not change again) and starts the
    /// next; the piece that falls out of the kept number is deleted.
    pub fn cut(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_all()?;
        let next = self.seq + 1;
        let file = BufWriter::new(File::create(piece_path(&self.base, next))?);
        self.file = file;
        self.seq = next;
        self.bytes = 0;
        self.body_from = 0;
        self.opened = Instant::now();
        self.at_line_start = true;
        if let Some(old) = next.checked_sub(self.limits.keep as u64) {
            match std::fs::remove_file(piece_path(&self.base, old)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Deletes `base`'s pieces (any number, [`DIGITS`] digits) left by an earlier run.
fn remove_old_pieces(base: &Path) -> io::Result<()> {
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let probe = piece_path(base, 0);
    let probe = probe.file_name().unwrap_or_default().to_string_lossy();
    let Some((before, after)) = probe.split_once(&"0".repeat(DIGITS)) else {
        return Ok(());
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_piece = name
            .strip_prefix(before)
            .and_then(|r| r.strip_suffix(after))
            .is_some_and(|n| n.len() == DIGITS && n.bytes().all(|b| b.is_ascii_digit()));
        if is_piece {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

impl Write for Pieces {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // A line goes to the records writer in one `write_all`, so its length is the line's.
        if self.auto && self.at_line_start && self.due(buf.len()) {
            self.cut()?;
        }
        let n = self.file.write(buf)?;
        self.bytes += n as u64;
        if n > 0 {
            self.at_line_start = buf[n - 1] == b'\n';
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Seeks within the current piece (the capture patches its header's `end` in place).
impl Seek for Pieces {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

impl Drop for Pieces {
    /// The last piece is made durable as the others were at their cut (the relay fsyncs its
    /// single files on stop; pieces are not among them).
    fn drop(&mut self) {
        if self.file.flush().is_ok() {
            let _ = self.file.get_ref().sync_all();
        }
    }
}

/// A size as `--rotate-size` takes it: bytes, or with `K`, `M` or `G` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "a size is a whole number of bytes, optionally with K, M or G".to_string())?;
    let mult: u64 = match unit {
        "" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        _ => return Err("a size's unit is K, M or G (KiB, MiB, GiB)".to_string()),
    };
    match n.checked_mul(mult) {
        Some(v) if v > 0 => Ok(v),
        _ => Err("a size must be more than 0 and fit in 64 bits".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: u64, keep: usize) -> Limits {
        Limits {
            max_bytes: Some(max_bytes),
            max_age: None,
            keep,
        }
    }

    fn pieces_in(dir: &Path, base: &Path) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p != base)
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn pieces_are_numbered_before_the_extension_so_name_order_is_piece_order() {
        assert_eq!(
            piece_path(Path::new("/d/cap.jsonl"), 3),
            Path::new("/d/cap.00000003.jsonl")
        );
        assert_eq!(piece_path(Path::new("rec"), 12), Path::new("rec.00000012"));
        assert!(piece_path(Path::new("c.jsonl"), 9) < piece_path(Path::new("c.jsonl"), 10));
        assert_eq!(
            pieces_pattern(Path::new("/d/cap.jsonl")),
            Path::new("/d/cap.*.jsonl")
        );
    }

    #[test]
    fn lines_are_cut_into_pieces_under_the_size_and_the_oldest_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("rec.jsonl");
        let mut p = Pieces::create(&base, limits(25, 3), true).unwrap();
        // Ten-byte lines: two fit in 25 bytes, a third would not.
        for i in 0..11 {
            p.write_all(format!("line {i:03}\n").as_bytes()).unwrap();
        }
        drop(p);
        let got = pieces_in(dir.path(), &base);
        assert_eq!(
            got,
            vec![
                ("rec.00000003.jsonl".into(), "line 006\nline 007\n".into()),
                ("rec.00000004.jsonl".into(), "line 008\nline 009\n".into()),
                ("rec.00000005.jsonl".into(), "line 010\n".into()),
            ],
            "pieces 0 to 2 were deleted: three are kept"
        );
        assert!(got.iter().all(|(_, text)| text.len() <= 25));
    }

    #[test]
    fn a_line_longer_than_the_size_is_a_piece_of_its_own_and_never_split() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("rec.jsonl");
        let mut p = Pieces::create(&base, limits(8, 10), true).unwrap();
        p.write_all(b"a\n").unwrap();
        p.write_all(b"a very long line\n").unwrap();
        p.write_all(b"b\n").unwrap();
        drop(p);
        let got: Vec<String> = pieces_in(dir.path(), &base)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(got, vec!["a\n", "a very long line\n", "b\n"]);
    }

    #[test]
    fn a_piece_past_its_age_is_cut_before_its_next_line_and_never_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("rec.jsonl");
        // Every piece is past an age of zero as soon as it is opened: each line is cut from
        // the one before, and none is cut from nothing.
        let limits = Limits {
            max_bytes: None,
            max_age: Some(Duration::ZERO),
            keep: 10,
        };
        let mut p = Pieces::create(&base, limits, true).unwrap();
        for line in ["a\n", "b\n", "c\n"] {
            p.write_all(line.as_bytes()).unwrap();
        }
        drop(p);
        let got: Vec<String> = pieces_in(dir.path(), &base)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(got, ["a\n", "b\n", "c\n"]);
    }

    #[test]
    fn a_header_alone_is_never_cut_from_its_body() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("cap.jsonl");
        let mut p = Pieces::create(&base, limits(10, 10), false).unwrap();
        p.write_all(b"a header line\n").unwrap();
        p.mark_body();
        assert!(
            !p.due(5),
            "a piece holds at least one line after its header"
        );
        p.write_all(b"x\n").unwrap();
        assert!(p.due(1));
    }

    #[test]
    fn an_earlier_runs_pieces_are_deleted_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("cap.jsonl");
        for name in [
            "cap.00000007.jsonl",
            "cap.jsonl",
            "cap.0000007.jsonl",
            "other.00000001.jsonl",
        ] {
            std::fs::write(dir.path().join(name), "x\n").unwrap();
        }
        drop(Pieces::create(&base, limits(10, 2), true).unwrap());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "cap.00000000.jsonl",
                "cap.0000007.jsonl",
                "cap.jsonl",
                "other.00000001.jsonl"
            ]
        );
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1T").is_err());
        assert!(parse_size("M").is_err());
    }
}
