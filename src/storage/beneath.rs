//! Confined access to one directory tree: every path is resolved by the
//! kernel relative to an open handle of the root, with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
//!
//! The kernel refuses, in the same system call that opens the file, any
//! resolution that would leave the root: a `..` above it, a symbolic link
//! with an absolute target, a relative link climbing out, a "magic" link
//! (`/proc/self/fd/*`, `/proc/*/root`). Links that stay beneath the root are
//! followed. There is no window between a check and the use of its result
//! (no user-space walk that a rename could race): what is opened is what was
//! checked. Loops end in `ELOOP` after the kernel's 40 links.
//!
//! Where the kernel has no `openat2` (before Linux 5.6, some seccomp
//! sandboxes, valgrind), paths are walked one segment at a time with
//! `openat(O_NOFOLLOW)` from the root's handle instead: still race-free
//! (every step is relative to a held directory handle), and stricter — no
//! link is followed at all.
//!
//! Everything else in the local backend works from the file descriptors this
//! module hands out (`*at` calls relative to a confined directory handle,
//! never following a link in the last component when writing or deleting).

#[cfg(not(target_os = "linux"))]
compile_error!(
    "zarrd's local mounts need Linux (openat2 with RESOLVE_BENEATH confines them): see src/storage/beneath.rs"
);

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The resolution rule every open uses.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// How often an open retries when the kernel reports a concurrent rename
/// (`EAGAIN`, possible with `RESOLVE_BENEATH`).
const RACE_RETRIES: usize = 8;

/// An open directory handle of a mount's root.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
    /// False where the kernel has no `openat2`: paths are walked.
    openat2: bool,
}

impl Root {
    /// Opens `path` (which must be a directory); lookups below it are
    /// confined by `openat2` where the kernel has it, else walked.
    ///
    /// # Errors
    /// The directory cannot be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let fd = rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let mut root = Self { fd, path: path.to_path_buf(), openat2: true };
        match root.open_at("", OFlags::PATH | OFlags::DIRECTORY) {
            Ok(_) => Ok(root),
            Err(Errno::NOSYS) => {
                tracing::warn!(
                    root = %path.display(),
                    "the kernel has no openat2: the local mount is confined by walking each path, and symbolic \
                     links in it are not followed"
                );
                root.openat2 = false;
                Ok(root)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// As [`Root::open`], walking paths as where there is no `openat2`.
    #[cfg(test)]
    fn open_walking(path: &Path) -> std::io::Result<Self> {
        let mut root = Self::open(path)?;
        root.openat2 = false;
        Ok(root)
    }

    /// The root's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root's handle.
    #[must_use]
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens `rel` (a `/`-separated path below the root; `""` is the root)
    /// with `flags`, confined to the root.
    ///
    /// # Errors
    /// The kernel's: `EXDEV` (the path leaves the root), `ELOOP` (a loop or
    /// a magic link), `ENOENT`, `ENOTDIR`, ...
    pub fn open_at(&self, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        if !self.openat2 {
            return self.walk(rel, flags);
        }
        let rel = if rel.is_empty() { "." } else { rel };
        let mut last = Errno::AGAIN;
        for _ in 0..RACE_RETRIES {
            match rustix::fs::openat2(&self.fd, rel, flags | OFlags::CLOEXEC, Mode::empty(), RESOLVE) {
                Err(e @ (Errno::AGAIN | Errno::INTR)) => last = e,
                other => return other,
            }
        }
        Err(last)
    }
}

impl Root {
    /// [`Root::open_at`] without `openat2`: one `openat(O_NOFOLLOW)` per
    /// segment, each relative to the directory handle the previous one
    /// gave; any link (or `..`) is `ELOOP` / `EXDEV`, never followed.
    fn walk(&self, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let is_link = |at: BorrowedFd<'_>, name: &str| {
            rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
        };
        if rel.is_empty() || rel == "." {
            return rustix::fs::openat(&self.fd, ".", flags | OFlags::CLOEXEC, Mode::empty());
        }
        let mut dir: Option<OwnedFd> = None;
        let mut segments = rel.split('/').peekable();
        while let Some(segment) = segments.next() {
            if matches!(segment, "" | "." | "..") {
                return Err(Errno::XDEV);
            }
            let at = dir.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd);
            if segments.peek().is_none() {
                if is_link(at, segment) {
                    return Err(Errno::LOOP);
                }
                // A link swapped in meanwhile is still not followed
                // (`O_NOFOLLOW`: `ELOOP`, or a handle of the link itself).
                return rustix::fs::openat(at, segment, flags | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty());
            }
            let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(at, segment, step, Mode::empty()) {
                Ok(fd) => dir = Some(fd),
                Err(Errno::NOTDIR) if is_link(at, segment) => return Err(Errno::LOOP),
                Err(e) => return Err(e),
            }
        }
        Err(Errno::NOENT)
    }
}

/// True for the errors that mean "the path leaves the root or loops":
/// treated as absent (reads) or as something in the way (writes).
#[must_use]
pub fn is_escape(e: Errno) -> bool {
    matches!(e, Errno::XDEV | Errno::LOOP)
}

/// True for the errors that mean "nothing there" on a lookup.
#[must_use]
pub fn is_absent(e: Errno) -> bool {
    matches!(e, Errno::NOENT | Errno::NOTDIR) || is_escape(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_inside_are_followed_and_links_out_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root_path = base.join("root");
        std::fs::create_dir_all(root_path.join("a")).unwrap();
        std::fs::write(root_path.join("a/f"), b"in").unwrap();
        std::fs::write(base.join("secret"), b"out").unwrap();
        std::os::unix::fs::symlink("a/f", root_path.join("inside")).unwrap();
        std::os::unix::fs::symlink("../secret", root_path.join("up")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root_path.join("abs")).unwrap();
        std::os::unix::fs::symlink("/proc/self/root/etc/hostname", root_path.join("magic")).unwrap();
        std::os::unix::fs::symlink(".", root_path.join("a/self")).unwrap();
        std::os::unix::fs::symlink("loop2", root_path.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", root_path.join("loop2")).unwrap();
        let root = Root::open(&root_path).unwrap();
        assert!(root.open_at("inside", OFlags::RDONLY).is_ok());
        assert!(root.open_at("a/self/self/f", OFlags::RDONLY).is_ok());
        for (rel, errno) in [("up", Errno::XDEV), ("abs", Errno::XDEV), ("magic", Errno::XDEV), ("loop1", Errno::LOOP)]
        {
            let got = root.open_at(rel, OFlags::RDONLY).unwrap_err();
            assert_eq!(got, errno, "{rel}");
            assert!(is_escape(got) && is_absent(got));
        }
        assert_eq!(root.open_at("../secret", OFlags::RDONLY).unwrap_err(), Errno::XDEV);

        // Without openat2: plain paths open, no link is followed at all.
        let walking = Root::open_walking(&root_path).unwrap();
        assert!(walking.open_at("a/f", OFlags::RDONLY).is_ok());
        assert!(walking.open_at("a", OFlags::PATH | OFlags::DIRECTORY).is_ok());
        assert!(walking.open_at("", OFlags::PATH | OFlags::DIRECTORY).is_ok());
        for rel in ["inside", "up", "abs", "magic", "loop1", "a/self/f", "a/self", "../secret"] {
            for flags in [OFlags::RDONLY, OFlags::PATH, OFlags::PATH | OFlags::DIRECTORY] {
                let got = walking.open_at(rel, flags).unwrap_err();
                assert!(is_escape(got), "{rel}: {got:?}");
            }
        }
        assert_eq!(walking.open_at("a/missing", OFlags::RDONLY).unwrap_err(), Errno::NOENT);
        assert_eq!(walking.open_at("a/f/x", OFlags::RDONLY).unwrap_err(), Errno::NOTDIR);
    }
}
