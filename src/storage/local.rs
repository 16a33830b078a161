//! Local directories, confined to their root (see [`super::beneath`]).
//!
//! # Confinement
//!
//! Nothing outside a mount's root is ever read, written, listed or deleted,
//! whatever links exist inside it:
//!
//! - Every path is resolved by the kernel beneath an open handle of the root
//!   (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), in the same
//!   system call that opens it, so no rename can slip between a check and
//!   its use.
//! - A symbolic link whose target stays inside the mount (relative, never
//!   climbing above the root) is followed, on reads and as a directory on
//!   the way to a written key.
//! - A link that leaves the mount (a `..` above the root, an absolute target,
//!   `/proc` magic links) or loops is treated as missing: reads answer 404,
//!   listings leave it out, and a write that would go through it is refused
//!   (409, naming the link).
//! - Writes replace the key's directory entry (rename) and deletes unlink
//!   it: neither ever follows a link in the last component, so deleting or
//!   overwriting a link changes the link, never what it points to.
//! - Listings show real directories as prefixes, files and links to files
//!   inside the mount as objects; links to directories are not listed
//!   (recursive listings never descend through a link, so a loop cannot make
//!   them endless, and a recursive delete never reaches through one).
//!
//! # Staging
//!
//! A write goes to an anonymous file (`O_TMPFILE`) in the key's directory,
//! invisible to every reader until it is complete. It is then linked under a
//! name in the reserved directory [`STAGING_DIR`] at the root and renamed
//! over the key (atomically: readers see the old or the new object). The
//! named staging file lives for a few microseconds; one left by a crash is
//! removed when the mount is next opened. Keys with a segment starting with
//! [`RESERVED_PREFIX`] are refused (400). Where the filesystem has no
//! `O_TMPFILE`, the file is written under a name in the staging directory.
//!
//! Conditional writes hold across processes sharing the directory: a
//! create (`If-None-Match: *`) links or renames without replacing, which
//! fails when the name exists; every replacing rename happens under an
//! exclusive `flock` of the key's directory, and an `If-Match` write
//! compares the name's current version with the expected one under that
//! lock, so another zarrd process cannot replace the key between the
//! check and the rename. (Deletes do not take the lock; on a network
//! filesystem `flock` is as good as its lock manager.)
//!
//! # Reads
//!
//! Reads are the hot path of the store protocol, and a local directory is
//! served from the page cache: open, stat and a read of a chunk take a few
//! microseconds, less than handing the work to the blocking thread pool and
//! back (`bench/store_get.sh` measured the hop as the largest single cost).
//! So reads up to [`INLINE_READ_MAX`] bytes run inline on the async worker,
//! as nginx's do; larger reads go to the blocking pool. A mount on a slow
//! network filesystem would stall a worker for the duration of one read.
//! A store-protocol GET ([`ReadRequest::stream`]) of an uncached object or
//! range over [`INLINE_READ_MAX`] is not read here at all: the open file
//! goes with the answer and is read a frame at a time (inline too) as the
//! answer is written ([`super::direct::FileSpan`]).
//!
//! Small objects (up to [`ObjectCacheSettings::max_object_bytes`]) are kept
//! in a byte-bounded cache and served from memory after one `stat` of the
//! name shows the very file a confined open read (same device, inode, size,
//! mtime and ctime: any write through zarrd is a rename to a new inode, and
//! any write in place changes ctime). That saves the open, read and copy of
//! hot chunks and metadata documents. With the cache on, that `stat` comes
//! first, so a missing key is answered by one failed `stat` without asking
//! the cache (see `LocalBackend::stat_first` for why that answer is the
//! confined one).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::beneath::{self, Root};
use super::direct::{read_span, FileSpan};
use super::request::etag_matches;
use super::tail::Tail;
use super::{
    request, KeyPrefix, ListEntry, ListName, ObjectMeta, PutCondition, PutOutcome, ReadOutcome, ReadRequest, Storage,
    StorageError, StorageResult, StoreKey,
};

/// Reads up to this many bytes run inline on the async worker.
pub const INLINE_READ_MAX: u64 = 4 * 1024 * 1024;

/// The frames a streamed answer ([`ReadRequest::stream`]) reads its file
/// in. Only reads larger than [`INLINE_READ_MAX`] are streamed: smaller
/// ones are read whole on the worker (as fast per byte in round 8's
/// measurements, with fewer system calls).
pub const STREAM_FRAME_BYTES: usize = 256 * 1024;

/// The directory at a mount's root that holds named staging files (for
/// microseconds; one left by a crash is removed when the mount is opened).
pub const STAGING_DIR: &str = ".zarrd-staging";

/// Key segments starting with this are reserved for staging files: such
/// keys are refused (400) and such names are left out of listings.
pub const RESERVED_PREFIX: &str = ".zarrd-staging";

/// The longest key segment (file name) a local mount can store, in bytes
/// (`NAME_MAX` of Linux filesystems).
pub const MAX_SEGMENT_BYTES: usize = 255;

/// How often a write starts again when a concurrent delete's clean-up
/// removed the directory it was writing into.
const WRITE_RETRIES: usize = 4;

/// Staging files older than this are removed at start even when the process
/// that named them might still run.
const STALE_STAGING: Duration = Duration::from_secs(3600);

/// Makes staging names unique across mounts of this process (and, with the
/// process id and start time, across processes sharing a directory).
static STAGING_COUNTER: AtomicU64 = AtomicU64::new(0);
static STAGING_EPOCH: LazyLock<u128> =
    LazyLock::new(|| std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));

/// Sizes of the per-mount object cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectCacheSettings {
    /// Bytes the cache may hold; 0 disables it.
    pub capacity_bytes: u64,
    /// Larger objects are never cached (1 MiB by default). Serving a large
    /// object from memory saves only the read copy (the write to the socket
    /// costs as much), while a working set of large objects larger than the
    /// cache makes every read a miss that inserts, evicts and faults fresh
    /// pages in: 1.1-1.8x the server CPU per 2.6 MB GET of reading it
    /// (bench/README.md, round 8).
    pub max_object_bytes: u64,
}

impl Default for ObjectCacheSettings {
    fn default() -> Self {
        Self { capacity_bytes: 256 * 1024 * 1024, max_object_bytes: 1024 * 1024 }
    }
}

/// What identifies one version of a file, from one `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Validator {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Validator {
    // The field types differ between architectures.
    #[allow(clippy::unnecessary_cast, clippy::cast_sign_loss, clippy::cast_possible_wrap)]
    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            size: st.st_size as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }

    /// The object's metadata. Its ETag is the inode, the modification and
    /// change times to the nanosecond and the size: any write changes the
    /// change time, also one that puts the modification time back (`rsync
    /// --inplace -t`, `tar -x`, `touch -r`), and zarrd's own writes set a
    /// modification time no other write of this process has
    /// ([`unique_mtime`]), so two versions it writes within one tick of a
    /// coarse kernel clock (ext4 before multigrain timestamps moves once a
    /// jiffy) still differ. A filesystem that keeps whole seconds only
    /// cannot tell apart same-size versions written in one second.
    fn meta(&self) -> ObjectMeta {
        let modified = u64::try_from(self.mtime.0)
            .ok()
            .map(|s| UNIX_EPOCH + Duration::new(s, u32::try_from(self.mtime.1).unwrap_or(0)));
        let nanos = |(s, ns): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(ns);
        ObjectMeta {
            size: self.size,
            last_modified: modified,
            etag: format!("\"{:x}-{:x}-{:x}-{:x}\"", self.ino, nanos(self.mtime), nanos(self.ctime), self.size),
            version_token: None,
            version_id: None,
        }
    }
}

/// What a directory entry is, as listings see it.
enum Entry {
    Dir,
    File(Validator),
}

fn kind(st: &rustix::fs::Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

#[derive(Debug)]
struct CachedObject {
    validator: Validator,
    meta: ObjectMeta,
    body: Bytes,
}

/// What [`LocalBackend::read_inline`] did.
#[derive(Debug)]
enum Inline {
    Done(ReadOutcome),
    /// Too large to read on the async worker: the open file, for the
    /// blocking pool.
    Large(File, Validator),
}

/// A mount over a local directory.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    root: Arc<Root>,
    cache: Option<moka::sync::Cache<StoreKey, Arc<CachedObject>>>,
    max_cached: u64,
}

/// Checks a key (or prefix) can be a path here: no segment longer than a
/// file name may be, none in the reserved staging namespace.
fn check_key(key: &str) -> StorageResult<()> {
    // The reserved prefix starts with a dot: most chunk keys have none, and
    // looking for one byte is cheaper than looking for the prefix.
    if key.len() <= MAX_SEGMENT_BYTES && (!key.as_bytes().contains(&b'.') || !key.contains(RESERVED_PREFIX)) {
        return Ok(());
    }
    for segment in key.split('/') {
        if segment.len() > MAX_SEGMENT_BYTES {
            let start: String = segment.chars().take(24).collect();
            return Err(StorageError::InvalidKey {
                reason: format!(
                    "key `{key}`: the segment `{start}...` is {} bytes long, and a local mount's file names are at \
                     most {MAX_SEGMENT_BYTES} bytes",
                    segment.len()
                ),
            });
        }
        if segment.starts_with(RESERVED_PREFIX) {
            return Err(StorageError::InvalidKey {
                reason: format!(
                    "key `{key}`: segments starting with `{RESERVED_PREFIX}` are reserved for zarrd's staging files"
                ),
            });
        }
    }
    Ok(())
}

/// A failed lookup: anything that means "not there" (including a path
/// leaving the mount, or looping) is not found.
fn lookup_error(key: &str, e: Errno) -> StorageError {
    if beneath::is_absent(e) {
        return StorageError::NotFound { key: key.to_string() };
    }
    StorageError::from_io(key, &e.into())
}

/// A failed write or delete.
fn write_error(key: &str, e: Errno) -> StorageError {
    match e {
        Errno::NAMETOOLONG => StorageError::InvalidKey {
            reason: format!("key `{key}` is longer than this filesystem's names or paths may be"),
        },
        Errno::ACCESS | Errno::PERM | Errno::ROFS => {
            StorageError::PermissionDenied { key: key.to_string(), reason: std::io::Error::from(e).to_string() }
        }
        _ => StorageError::Unavailable { reason: format!("{key}: {}", std::io::Error::from(e)) },
    }
}

/// Why a directory cannot be created or entered on the way to `key`.
fn in_the_way(key: &str, rel: &str, e: Errno) -> StorageError {
    let conflict = |reason: String| StorageError::Conflict { key: key.to_string(), reason };
    match e {
        Errno::NOTDIR | Errno::EXIST => conflict(format!("{rel} is an object, not a prefix")),
        Errno::XDEV | Errno::LOOP => conflict(format!(
            "{rel} is a symbolic link that leaves the mount or loops, and zarrd never writes through one"
        )),
        other => write_error(key, other),
    }
}

fn join_error(e: &tokio::task::JoinError) -> StorageError {
    StorageError::Unavailable { reason: e.to_string() }
}

/// `key` split into its directory (relative to the root) and its name.
fn split_key(key: &StoreKey) -> (&str, &str) {
    key.as_str().rsplit_once('/').unwrap_or(("", key.as_str()))
}

fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_io_error(e).unwrap_or(Errno::IO)
}

/// Links the open (anonymous) file `file` as `dir/name`.
fn link_fd(file: &File, dir: BorrowedFd<'_>, name: &str) -> rustix::io::Result<()> {
    match rustix::fs::linkat(file, "", dir, name, AtFlags::EMPTY_PATH) {
        // Kernels before 6.10 allow `AT_EMPTY_PATH` only with
        // CAP_DAC_READ_SEARCH; the /proc link works for any owner.
        Err(Errno::NOENT | Errno::PERM | Errno::ACCESS) => {
            let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
            rustix::fs::linkat(rustix::fs::CWD, proc.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW)
        }
        other => other,
    }
}

/// How a write puts its file under the key's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement<'a> {
    /// Only where the name is free (`If-None-Match: *`): `linkat` or
    /// `RENAME_NOREPLACE`, atomic across processes.
    Create,
    /// Over whatever is there, under the directory's lock ([`lock_dir`]).
    Replace,
    /// Over the version with one of these ETags only (`If-Match`): checked
    /// and renamed under the directory's lock, so no other process writing
    /// the directory through zarrd can slip between the check and the rename.
    ReplaceIf(&'a [String]),
}

/// The error a [`Placement::ReplaceIf`] answers when the name no longer
/// holds the expected version (`ESTALE`: nothing the calls involved return
/// for a local file; an NFS `ESTALE` there would be retried the same way).
const CHANGED: Errno = Errno::STALE;

/// An exclusive `flock` on the directory `dir`, held while the returned
/// descriptor lives. Every process writing the directory through zarrd
/// takes it around its check and rename; readers never do.
fn lock_dir(dir: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    let fd = rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(fd)
}

/// Renames `from_dir/from` to `to_dir/to` as `how` says, removing the
/// source when that fails.
fn place(
    from_dir: BorrowedFd<'_>,
    from: &str,
    to_dir: BorrowedFd<'_>,
    to: &str,
    how: Placement<'_>,
) -> rustix::io::Result<()> {
    let result = match how {
        Placement::Create => rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::NOREPLACE),
        Placement::Replace | Placement::ReplaceIf(_) => lock_dir(to_dir).and_then(|_lock| {
            if let Placement::ReplaceIf(expected) = how {
                let current = match rustix::fs::statat(to_dir, to, AtFlags::empty()) {
                    Ok(st) => Some(Validator::of(&st).meta().etag),
                    Err(Errno::NOENT) => None,
                    Err(e) => return Err(e),
                };
                if !current.is_some_and(|etag| etag_matches(expected, &etag)) {
                    return Err(CHANGED);
                }
            }
            rustix::fs::renameat(from_dir, from, to_dir, to)
        }),
    };
    if result.is_err() {
        let _ = rustix::fs::unlinkat(from_dir, from, AtFlags::empty());
    }
    result
}

/// The last modification time [`unique_mtime`] gave, in nanoseconds.
static LAST_MTIME: AtomicU64 = AtomicU64::new(0);

/// A modification time for a file this process writes: now, to the
/// nanosecond, and later than every one it gave before.
fn unique_mtime() -> rustix::fs::Timespec {
    let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let now = u64::try_from(now).unwrap_or(u64::MAX);
    let mut last = LAST_MTIME.load(Ordering::Relaxed);
    let ns = loop {
        let next = now.max(last.saturating_add(1));
        match LAST_MTIME.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    #[allow(clippy::cast_possible_wrap)] // Nanoseconds since 1970 fit i64 until 2262.
    rustix::fs::Timespec { tv_sec: (ns / 1_000_000_000) as i64, tv_nsec: (ns % 1_000_000_000) as _ }
}

/// Sets a written file's modification time to [`unique_mtime`] (its access
/// time untouched), where the filesystem lets it: a mount that makes files
/// another user's (CIFS or ntfs3 with `uid=`, some FUSE filesystems) or has
/// no such call keeps the kernel's time, and the change time in the ETag
/// still tells most versions apart.
fn stamp(file: &File) -> rustix::io::Result<()> {
    let omit = rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT };
    match rustix::fs::futimens(file, &rustix::fs::Timestamps { last_access: omit, last_modification: unique_mtime() }) {
        Err(Errno::PERM | Errno::ACCESS | Errno::NOSYS | Errno::OPNOTSUPP | Errno::INVAL) => Ok(()),
        other => other,
    }
}

fn staging_name() -> String {
    let n = STAGING_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{:x}-{n}", std::process::id(), *STAGING_EPOCH)
}

impl LocalBackend {
    /// Serves the directory `root`, which must exist.
    ///
    /// # Errors
    /// `Unavailable` when `root` is not a directory.
    pub fn new(root: PathBuf) -> StorageResult<Self> {
        Self::with_cache(root, ObjectCacheSettings::default())
    }

    /// Serves the directory `root` with an object cache of the given sizes.
    /// Staging files a crashed process left are removed.
    ///
    /// # Errors
    /// `Unavailable` when `root` is not a directory, or the kernel cannot
    /// confine lookups to it.
    pub fn with_cache(root: PathBuf, cache: ObjectCacheSettings) -> StorageResult<Self> {
        let root = root
            .canonicalize()
            .map_err(|e| StorageError::Unavailable { reason: format!("{}: {e}", root.display()) })?;
        if !root.is_dir() {
            return Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) });
        }
        let handle =
            Root::open(&root).map_err(|e| StorageError::Unavailable { reason: format!("{}: {e}", root.display()) })?;
        let object_cache = (cache.capacity_bytes > 0).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(cache.capacity_bytes)
                .weigher(|_: &StoreKey, v: &Arc<CachedObject>| {
                    u32::try_from(v.body.len().saturating_add(64)).unwrap_or(u32::MAX)
                })
                .build()
        });
        let backend = Self {
            root: Arc::new(handle),
            cache: object_cache,
            max_cached: cache.max_object_bytes.min(cache.capacity_bytes),
        };
        backend.sweep_staging();
        Ok(backend)
    }

    /// Removes the named staging files of processes that no longer run (a
    /// crash between a staging link and its rename; microseconds wide).
    fn sweep_staging(&self) {
        let Ok(dir) = self.root.open_at(STAGING_DIR, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW) else {
            return;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&dir) else { return };
        let own = std::process::id().to_string();
        let now = std::time::SystemTime::now();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            let pid = name.split('-').next().unwrap_or("");
            let alive = pid == own || (!pid.is_empty() && std::path::Path::new("/proc").join(pid).exists());
            let stale = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                let mtime = u64::try_from(st.st_mtime).map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s));
                now.duration_since(mtime).is_ok_and(|age| age > STALE_STAGING)
            });
            if !alive || stale {
                let _ = rustix::fs::unlinkat(&dir, name, AtFlags::empty());
            }
        }
    }

    /// The staging directory, created when missing; `None` when it cannot be
    /// used (then staging happens in the key's directory).
    fn staging_dir(&self) -> Option<OwnedFd> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        match self.root.open_at(STAGING_DIR, flags) {
            Ok(fd) => Some(fd),
            Err(Errno::NOENT) => {
                let _ = rustix::fs::mkdirat(self.root.fd(), STAGING_DIR, Mode::from_raw_mode(0o777));
                self.root.open_at(STAGING_DIR, flags).ok()
            }
            Err(_) => None,
        }
    }

    /// Opens the object at `key` for reading (confined), with its `stat`.
    fn open_object(&self, key: &StoreKey) -> StorageResult<(File, Validator)> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.root.open_at(key.as_str(), flags).map_err(|e| lookup_error(key.as_str(), e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| lookup_error(key.as_str(), e))?;
        match kind(&st) {
            FileType::Directory => Err(StorageError::IsPrefix { key: key.to_string() }),
            FileType::RegularFile => Ok((File::from(fd), Validator::of(&st))),
            _ => Err(StorageError::NotFound { key: key.to_string() }),
        }
    }

    /// The part of a read done on the async worker, after one confined open
    /// and `fstat`: a cached, unchanged object is served from memory; HEAD
    /// requests, failed preconditions and reads up to [`INLINE_READ_MAX`]
    /// bytes are answered here; a larger read is handed back
    /// ([`Inline::Large`]) for the blocking pool. A directory is a prefix; a
    /// missing file is not found.
    fn read_inline(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<Inline> {
        check_key(key.as_str())?;
        let hit = match &self.cache {
            Some(cache) => match self.stat_first(key)? {
                // A cached object is revalidated by that one `stat` of its
                // name: when the name leads (through whatever links) to the
                // very file that was read through a confined open — same
                // device, inode, size and times — its cached bytes are what a
                // confined open would read now, and nothing outside the mount
                // is revealed. Anything else takes the confined open below.
                // (A confined open and `fstat` cost ~4 µs more than a `stat`:
                // a fifth of a small GET.)
                Some(seen) => match cache.get(key) {
                    Some(hit) if seen == hit.validator => return Self::serve_cached(key, &hit, req),
                    other => other,
                },
                None => cache.get(key),
            },
            None => None,
        };
        let (file, validator) = self.open_object(key)?;
        if let Some(hit) = hit {
            // Same inode, size and times: the cached metadata (ETag
            // included, which is made of them) is this file's.
            if hit.validator == validator {
                return Self::serve_cached(key, &hit, req);
            }
        }
        if !req.head_only {
            // A range never reads past the end of the file.
            let len = req.range.map_or(validator.size, |r| r.max_len().min(validator.size));
            // A streamed answer reads its frames as it is written, not here.
            let cached = self.cache.is_some() && !req.bulk && validator.size <= self.max_cached;
            let streamed = req.stream && !cached;
            if len > INLINE_READ_MAX && !streamed {
                return Ok(Inline::Large(file, validator));
            }
        }
        // A bulk read does not fill the cache.
        let cache = self.cache.as_ref().filter(|_| !req.bulk).map(|c| (c, self.max_cached));
        Self::read_file(file, validator, key, req, cache).map(Inline::Done)
    }

    /// The `stat` a read with the object cache on starts with, before the
    /// cache is asked: the validator of a regular file at `key`'s name, or
    /// `None` for anything else (a link, a directory, a failed `stat`), which
    /// the confined open then answers. A name that does not exist is not
    /// found at once: a missing key (most of them are missing chunks) costs
    /// one failed `stat` and never touches the cache.
    ///
    /// The `stat` resolves the name without confinement, and only its
    /// "absent" answers (`ENOENT`, `ENOTDIR`) are taken as they are: a
    /// confined lookup walks the same entries and can only fail earlier
    /// (`RESOLVE_BENEATH` refuses, never redirects), so where the unconfined
    /// walk finds nothing the confined one finds nothing either, and the
    /// answer (404) is the one the confined open gives. Everything the `stat`
    /// finds is read through the confined open, or served from the cache only
    /// when it is the very file a confined open read before.
    ///
    /// Given up for that: the unconfined walk may pass through a link inside
    /// the mount to a path outside it (only someone who can write the
    /// mount's directory can place one). It never reads or serves anything
    /// there, and does not trigger an automount at the last component
    /// (`AT_NO_AUTOMOUNT`), but the 404 it leads to comes a `stat` sooner
    /// when the outside path is missing: a timing hint of what exists out
    /// there, to that person.
    fn stat_first(&self, key: &StoreKey) -> StorageResult<Option<Validator>> {
        let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
        match rustix::fs::statat(self.root.fd(), key.as_str(), flags) {
            Ok(st) if kind(&st) == FileType::RegularFile => Ok(Some(Validator::of(&st))),
            Ok(_) => Ok(None),
            Err(Errno::NOENT | Errno::NOTDIR) => Err(StorageError::NotFound { key: key.to_string() }),
            Err(_) => Ok(None),
        }
    }

    /// A read answered from a cached object.
    fn serve_cached(key: &StoreKey, hit: &CachedObject, req: &ReadRequest) -> StorageResult<Inline> {
        let meta = hit.meta.clone();
        let range = request::evaluate(key.as_str(), &meta, req)?;
        if !req.head_only {
            req.check_len(key.as_str(), range.as_ref().map_or(meta.size, |r| r.end - r.start))?;
        }
        let body = match (&range, req.head_only) {
            (_, true) => Bytes::new(),
            (None, false) => hit.body.clone(),
            (Some(r), false) => hit.body.slice(to_usize(r.start)?..to_usize(r.end)?),
        };
        Ok(Inline::Done(ReadOutcome { meta, range, body, tail: None }))
    }

    /// Reads an open file; caches it whole when it is small enough.
    fn read_file(
        file: File,
        validator: Validator,
        key: &StoreKey,
        req: &ReadRequest,
        cache: Option<(&moka::sync::Cache<StoreKey, Arc<CachedObject>>, u64)>,
    ) -> StorageResult<ReadOutcome> {
        let io = |e: std::io::Error| StorageError::from_io(key.as_str(), &e);
        let meta = validator.meta();
        let range = request::evaluate(key.as_str(), &meta, req)?;
        if req.head_only {
            return Ok(ReadOutcome { meta, range, body: Bytes::new(), tail: None });
        }
        req.check_len(key.as_str(), range.as_ref().map_or(meta.size, |r| r.end - r.start))?;
        let cacheable = cache.filter(|(_, max)| meta.size <= *max);
        let span = if cacheable.is_some() { 0..meta.size } else { range.clone().unwrap_or(0..meta.size) };
        let len = to_usize(span.end - span.start)?;
        if req.stream && cacheable.is_none() && len as u64 > INLINE_READ_MAX {
            let tail = Tail::File(FileSpan::new(file, span, key.as_str()));
            return Ok(ReadOutcome { meta, range, body: Bytes::new(), tail: Some(tail) });
        }
        let buf = read_span(&file, span.start, len).map_err(io)?;
        if buf.len() != len {
            // The file shrank under us (an overwrite is a rename, so the open
            // handle keeps the old inode; this guards truncation in place).
            return Err(StorageError::Unavailable { reason: format!("{key} was truncated while being read") });
        }
        let mut body = Bytes::from(buf);
        if let Some((cache, _)) = cacheable {
            let cached = CachedObject { validator, meta: meta.clone(), body: body.clone() };
            cache.insert(key.clone(), Arc::new(cached));
            if let Some(r) = &range {
                body = body.slice(to_usize(r.start)?..to_usize(r.end)?);
            }
        }
        Ok(ReadOutcome { meta, range, body, tail: None })
    }

    /// Opens the directory `rel` for writing into, creating what is missing
    /// (confined: through links inside the mount, never through one leaving
    /// it), or names what is in the way.
    fn make_dirs(&self, key: &StoreKey, rel: &str) -> StorageResult<OwnedFd> {
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        match self.root.open_at(rel, flags) {
            Ok(fd) => return Ok(fd),
            Err(e) if beneath::is_absent(e) => {}
            Err(e) => return Err(write_error(key.as_str(), e)),
        }
        let mut current = self.root.open_at("", flags).map_err(|e| write_error(key.as_str(), e))?;
        let mut end = 0;
        for segment in rel.split('/') {
            end += segment.len();
            let sub = &rel[..end];
            end += 1;
            current = match self.root.open_at(sub, flags) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&current, segment, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(in_the_way(key.as_str(), sub, e)),
                    }
                    self.root.open_at(sub, flags).map_err(|e| in_the_way(key.as_str(), sub, e))?
                }
                Err(e) => return Err(in_the_way(key.as_str(), sub, e)),
            };
        }
        Ok(current)
    }

    /// Writes `body` as `parent/name`, atomically (see the module
    /// documentation), placed as `how` says: [`Placement::Create`] fails
    /// with `EEXIST` when the name exists, [`Placement::ReplaceIf`] with
    /// [`CHANGED`] when it holds another version.
    fn write_in(&self, parent: &OwnedFd, name: &str, body: &[u8], how: Placement<'_>) -> rustix::io::Result<Validator> {
        let tmp = match rustix::fs::openat(
            parent,
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => File::from(fd),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return self.write_named(parent, name, body, how),
            Err(e) => return Err(e),
        };
        (&tmp).write_all(body).map_err(|e| io_errno(&e))?;
        stamp(&tmp)?;
        if how == Placement::Create {
            link_fd(&tmp, parent.as_fd(), name)?;
        } else {
            let mut placed = false;
            if let Some(staging) = self.staging_dir() {
                let staged = staging_name();
                match link_fd(&tmp, staging.as_fd(), &staged) {
                    Ok(()) => {
                        place(staging.as_fd(), &staged, parent.as_fd(), name, how)?;
                        placed = true;
                    }
                    // The key's directory is on another filesystem.
                    Err(Errno::XDEV) => {}
                    Err(e) => return Err(e),
                }
            }
            if !placed {
                let staged = format!("{RESERVED_PREFIX}-{}", staging_name());
                link_fd(&tmp, parent.as_fd(), &staged)?;
                place(parent.as_fd(), &staged, parent.as_fd(), name, how)?;
            }
        }
        rustix::fs::fstat(&tmp).map(|st| Validator::of(&st))
    }

    /// [`Self::write_in`] where the filesystem has no `O_TMPFILE`: the file
    /// is written under a staging name, then renamed.
    fn write_named(
        &self,
        parent: &OwnedFd,
        name: &str,
        body: &[u8],
        how: Placement<'_>,
    ) -> rustix::io::Result<Validator> {
        let staging = self.staging_dir();
        let mut places: Vec<(BorrowedFd<'_>, String)> = Vec::with_capacity(2);
        if let Some(dir) = &staging {
            places.push((dir.as_fd(), staging_name()));
        }
        places.push((parent.as_fd(), format!("{RESERVED_PREFIX}-{}", staging_name())));
        let mut last = Errno::XDEV;
        for (dir, staged) in places {
            let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let file = File::from(rustix::fs::openat(dir, staged.as_str(), flags, Mode::from_raw_mode(0o666))?);
            if let Err(e) = (&file).write_all(body).map_err(|e| io_errno(&e)).and_then(|()| stamp(&file)) {
                let _ = rustix::fs::unlinkat(dir, staged.as_str(), AtFlags::empty());
                return Err(e);
            }
            match place(dir, &staged, parent.as_fd(), name, how) {
                Ok(()) => return rustix::fs::fstat(&file).map(|st| Validator::of(&st)),
                Err(Errno::XDEV) => last = Errno::XDEV,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    fn write_blocking(&self, key: &StoreKey, body: &[u8], how: Placement<'_>) -> StorageResult<ObjectMeta> {
        let (dir, name) = split_key(key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let parent = self.make_dirs(key, dir)?;
            match self.write_in(&parent, name, body, how) {
                Ok(v) => return Ok(v.meta()),
                // A concurrent delete removed the (empty) directory.
                Err(Errno::NOENT) if attempt < WRITE_RETRIES => {}
                Err(Errno::EXIST) if how == Placement::Create => {
                    return Err(StorageError::PreconditionFailed {
                        key: key.to_string(),
                        reason: "If-None-Match: * but the key was created meanwhile".into(),
                    })
                }
                Err(CHANGED) if matches!(how, Placement::ReplaceIf(_)) => {
                    return Err(StorageError::PreconditionFailed {
                        key: key.to_string(),
                        reason: "If-Match: the key was changed meanwhile (by another process)".into(),
                    })
                }
                Err(Errno::ISDIR | Errno::NOTEMPTY) => {
                    return Err(StorageError::Conflict {
                        key: key.to_string(),
                        reason: "it is a prefix with keys below it".into(),
                    })
                }
                Err(e) => return Err(write_error(key.as_str(), e)),
            }
        }
    }

    fn delete_blocking(&self, key: &StoreKey) -> StorageResult<()> {
        let (dir, name) = split_key(key);
        let parent = match self.root.open_at(dir, OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) => fd,
            // Nothing of the mount's is there (or only through a link leaving it).
            Err(e) if beneath::is_absent(e) => return Ok(()),
            Err(e) => return Err(write_error(key.as_str(), e)),
        };
        // Never follows a link in the last component: deleting a link
        // removes the link.
        match rustix::fs::unlinkat(&parent, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(()),
            Err(Errno::ISDIR | Errno::PERM)
                if self.root.open_at(key.as_str(), OFlags::PATH | OFlags::DIRECTORY).is_ok() =>
            {
                return Err(StorageError::Conflict {
                    key: key.to_string(),
                    reason: "it is a prefix, not an object: delete the keys below it one by one (or a whole node \
                             with DELETE /api/v1/nodes/...?recursive=true)"
                        .into(),
                })
            }
            Err(e) => return Err(write_error(key.as_str(), e)),
        }
        self.remove_empty_dirs(key);
        Ok(())
    }

    /// Removes the directories of `key` left empty, deepest first, as
    /// `object_store`'s local store did (never the root).
    fn remove_empty_dirs(&self, key: &StoreKey) {
        let mut dir = split_key(key).0;
        while !dir.is_empty() {
            let (up, name) = dir.rsplit_once('/').unwrap_or(("", dir));
            let Ok(fd) = self.root.open_at(up, OFlags::PATH | OFlags::DIRECTORY) else { return };
            if rustix::fs::unlinkat(&fd, name, AtFlags::REMOVEDIR).is_err() {
                return;
            }
            dir = up;
        }
    }

    /// What the entry `name` of the directory `dir` (at `rel`, relative to
    /// the root) is for listings: real directories, files, and links to
    /// files inside the mount; `None` for anything else (links to
    /// directories included).
    fn entry(&self, dir: &OwnedFd, rel: &str, name: &str, file_type: FileType) -> Option<Entry> {
        let file_type = match file_type {
            FileType::Directory | FileType::RegularFile | FileType::Symlink => file_type,
            _ => kind(&rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?),
        };
        match file_type {
            FileType::Directory => Some(Entry::Dir),
            FileType::RegularFile => {
                let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
                (kind(&st) == FileType::RegularFile).then(|| Entry::File(Validator::of(&st)))
            }
            FileType::Symlink => {
                let fd = self.root.open_at(&join_rel(rel, name), OFlags::PATH).ok()?;
                let st = rustix::fs::fstat(&fd).ok()?;
                (kind(&st) == FileType::RegularFile).then(|| Entry::File(Validator::of(&st)))
            }
            _ => None,
        }
    }

    /// The usable names of a directory's entries, with their types.
    fn read_dir(dir: &OwnedFd, what: &str) -> StorageResult<Vec<(String, FileType)>> {
        let mut out = Vec::new();
        Self::each_dir_entry(dir, what, |name, file_type| {
            out.push((name.to_string(), file_type));
            true
        })?;
        Ok(out)
    }

    /// Calls `each` with the usable name of every entry of a directory, and
    /// its type, as the directory is read, until it answers false.
    fn each_dir_entry(dir: &OwnedFd, what: &str, mut each: impl FnMut(&str, FileType) -> bool) -> StorageResult<()> {
        let failed =
            |e: Errno| StorageError::Unavailable { reason: format!("listing {what}: {}", std::io::Error::from(e)) };
        for entry in rustix::fs::Dir::read_from(dir).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." || name.starts_with(RESERVED_PREFIX) {
                continue;
            }
            if !each(name, entry.file_type()) {
                break;
            }
        }
        Ok(())
    }

    /// The first `keep` entries of a directory in name order among those
    /// `accept` takes (with what it made of them), in order, and whether it
    /// took more: only `keep` names are ever held, so a directory of
    /// millions of files costs its read and `keep` names, not its size.
    fn first_entries<T>(
        dir: &OwnedFd,
        what: &str,
        keep: usize,
        mut accept: impl FnMut(&str, FileType) -> Option<T>,
    ) -> StorageResult<(Vec<(String, T)>, bool)> {
        /// A heap entry ordered by its name alone.
        struct ByName<T>(String, T);
        impl<T> PartialEq for ByName<T> {
            fn eq(&self, other: &Self) -> bool {
                self.0 == other.0
            }
        }
        impl<T> Eq for ByName<T> {}
        impl<T> PartialOrd for ByName<T> {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl<T> Ord for ByName<T> {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.cmp(&other.0)
            }
        }
        // The largest name kept on top, to be dropped for a smaller one.
        let mut heap = std::collections::BinaryHeap::new();
        let mut more = false;
        Self::each_dir_entry(dir, what, |name, file_type| {
            if heap.len() == keep && heap.peek().is_none_or(|top: &ByName<T>| name >= top.0.as_str()) {
                // Past the kept names (or nothing is kept): only whether
                // there is more matters.
                more = more || accept(name, file_type).is_some();
                return true;
            }
            if let Some(made) = accept(name, file_type) {
                heap.push(ByName(name.to_string(), made));
                if heap.len() > keep {
                    heap.pop();
                    more = true;
                }
            }
            true
        })?;
        let kept = heap.into_sorted_vec().into_iter().map(|ByName(name, made)| (name, made)).collect();
        Ok((kept, more))
    }

    fn list_blocking(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        let Some(dir) = self.open_listed(prefix)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (name, file_type) in Self::read_dir(&dir, prefix.as_str())? {
            if prefix.child(&name).is_err() {
                continue;
            }
            match self.entry(&dir, prefix.as_str(), &name, file_type) {
                Some(Entry::Dir) => out.push(ListEntry::Prefix { name }),
                Some(Entry::File(v)) => out.push(ListEntry::Object { name, meta: v.meta() }),
                None => {}
            }
        }
        out.sort_by(|a, b| super::object::entry_name(a).cmp(super::object::entry_name(b)));
        Ok(out)
    }

    /// [`Self::list_blocking`] for the first `limit` entries: the names are
    /// read (only `limit` of them held), and only the entries answered are
    /// looked up, besides links and entries of unknown type, whose target
    /// decides whether they are listed at all (a directory of a million
    /// files costs `limit` names, not a million `stat`s and their metadata).
    fn list_limited_blocking(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        let Some((dir, kept, more)) = self.first_listed(prefix, limit)? else { return Ok((Vec::new(), false)) };
        let mut out = Vec::with_capacity(kept.len());
        for (name, (file_type, _)) in kept {
            // Looked up now; gone meanwhile is left out.
            match self.entry(&dir, prefix.as_str(), &name, file_type) {
                Some(Entry::Dir) => out.push(ListEntry::Prefix { name }),
                Some(Entry::File(v)) => out.push(ListEntry::Object { name, meta: v.meta() }),
                None => {}
            }
        }
        Ok((out, more))
    }

    /// [`Self::list_limited_blocking`] without the files' metadata: names
    /// and the types the directory read gave; a look-up only for links and
    /// entries of unknown type.
    fn list_names_limited_blocking(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListName>, bool)> {
        let Some((_, kept, more)) = self.first_listed(prefix, limit)? else { return Ok((Vec::new(), false)) };
        let out = kept.into_iter().map(|(name, (_, prefix))| ListName { name, prefix, size: None }).collect();
        Ok((out, more))
    }

    /// The directory of a limited listing (`None` when there is none) and
    /// its first `limit` listed entries by name ([`Self::first_entries`] of
    /// [`Self::listed_kind`]), and whether it lists more.
    #[allow(clippy::type_complexity)]
    fn first_listed(
        &self,
        prefix: &KeyPrefix,
        limit: usize,
    ) -> StorageResult<Option<(OwnedFd, Vec<(String, (FileType, bool))>, bool)>> {
        let Some(dir) = self.open_listed(prefix)? else { return Ok(None) };
        let (kept, more) = Self::first_entries(&dir, prefix.as_str(), limit, |name, file_type| {
            self.listed_kind(&dir, prefix, name, file_type)
        })?;
        Ok(Some((dir, kept, more)))
    }

    /// The directory of a listing, `None` when there is none.
    fn open_listed(&self, prefix: &KeyPrefix) -> StorageResult<Option<OwnedFd>> {
        match self.root.open_at(prefix.as_str(), OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if beneath::is_absent(e) => Ok(None),
            Err(e) => Err(lookup_error(prefix.as_str(), e)),
        }
    }

    /// Whether an entry of a listing is listed, with its type as read and
    /// whether it is listed as a prefix: a directory or a regular file as
    /// the directory read says (looked up later, if shown), a link or an
    /// entry of unknown type as [`Self::entry`] resolves it, a name that is
    /// no valid key not at all.
    fn listed_kind(
        &self,
        dir: &OwnedFd,
        prefix: &KeyPrefix,
        name: &str,
        file_type: FileType,
    ) -> Option<(FileType, bool)> {
        prefix.child(name).ok()?;
        // A filesystem without `d_type` (XFS with ftype=0, NFS without
        // READDIRPLUS) says nothing: one `stat` then says what it is.
        let file_type = match file_type {
            FileType::Directory | FileType::RegularFile | FileType::Symlink => file_type,
            _ => kind(&rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?),
        };
        match file_type {
            FileType::Directory => Some((file_type, true)),
            FileType::RegularFile => Some((file_type, false)),
            FileType::Symlink => match self.entry(dir, prefix.as_str(), name, file_type)? {
                Entry::Dir => Some((file_type, true)),
                Entry::File(_) => Some((file_type, false)),
            },
            _ => None,
        }
    }

    fn list_recursive_blocking(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        let mut out = Vec::new();
        self.walk_blocking(prefix, &mut |name, meta| {
            if out.len() >= limit {
                return false;
            }
            out.push((name.to_string(), meta));
            true
        })?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Calls `each` with every file below `prefix` (its name relative to
    /// `prefix`) until it answers false.
    fn walk_blocking(&self, prefix: &KeyPrefix, each: &mut dyn FnMut(&str, ObjectMeta) -> bool) -> StorageResult<()> {
        // Relative names of directories still to read; each is opened when
        // its turn comes. The prefix itself resolves as reads do (through
        // links inside the mount); below it only real directories are
        // queued and opened with `O_NOFOLLOW`, so the walk never descends
        // through a link and a loop cannot make it endless.
        let mut pending = vec![String::new()];
        'walk: while let Some(sub) = pending.pop() {
            let (rel, flags) = if sub.is_empty() {
                (prefix.as_str().to_string(), OFlags::RDONLY | OFlags::DIRECTORY)
            } else {
                (join_rel(prefix.as_str(), &sub), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW)
            };
            let dir = match self.root.open_at(&rel, flags) {
                Ok(fd) => fd,
                Err(e) if sub.is_empty() && !beneath::is_absent(e) => return Err(lookup_error(prefix.as_str(), e)),
                // Absent, leaving the mount, or gone (or replaced) meanwhile.
                Err(_) => continue,
            };
            // The directory is read as it is walked: none of its names is
            // held but those of the directories still to read.
            let mut stopped = false;
            Self::each_dir_entry(&dir, &rel, |name, file_type| {
                let name_rel = join_rel(&sub, name);
                if prefix.child(&name_rel).is_err() {
                    return true;
                }
                // `Entry::Dir` is only ever a real directory.
                match self.entry(&dir, &rel, name, file_type) {
                    Some(Entry::Dir) => pending.push(name_rel),
                    Some(Entry::File(v)) if !each(&name_rel, v.meta()) => stopped = true,
                    Some(Entry::File(_)) | None => {}
                }
                !stopped
            })?;
            if stopped {
                break 'walk;
            }
        }
        Ok(())
    }
}

fn to_usize(n: u64) -> StorageResult<usize> {
    usize::try_from(n).map_err(|_| StorageError::Unavailable { reason: format!("{n} bytes do not fit in memory") })
}

/// Checks a write's condition against the current object.
fn check_condition(key: &StoreKey, condition: &PutCondition, current: Option<&ObjectMeta>) -> StorageResult<()> {
    let failed = |reason: String| StorageError::PreconditionFailed { key: key.to_string(), reason };
    match condition {
        PutCondition::None => Ok(()),
        PutCondition::IfAbsent if current.is_some() => Err(failed("If-None-Match: * but the key exists".into())),
        PutCondition::IfAbsent => Ok(()),
        PutCondition::IfMatch(list) => {
            let Some(meta) = current else {
                return Err(failed("If-Match given but the key does not exist".into()));
            };
            if etag_matches(list, &meta.etag) {
                Ok(())
            } else {
                Err(failed(format!("If-Match {} does not match the current ETag {}", list.join(", "), meta.etag)))
            }
        }
    }
}

#[async_trait]
impl Storage for LocalBackend {
    async fn read(&self, key: &StoreKey, req: &ReadRequest) -> StorageResult<ReadOutcome> {
        match self.read_inline(key, req)? {
            Inline::Done(out) => Ok(out),
            Inline::Large(file, validator) => {
                let (key, req) = (key.clone(), req.clone());
                tokio::task::spawn_blocking(move || Self::read_file(file, validator, &key, &req, None))
                    .await
                    .map_err(|e| join_error(&e))?
            }
        }
    }

    /// One confined open and `fstat`, inline (as a small read's): the
    /// bytes are read by the caller ([`super::direct`]).
    async fn open_file(&self, key: &StoreKey) -> StorageResult<Option<super::direct::OpenFile>> {
        check_key(key.as_str())?;
        let (file, validator) = self.open_object(key)?;
        Ok(Some(super::direct::OpenFile::new(file, validator.size, key.to_string())))
    }

    fn opens_files(&self) -> bool {
        true
    }

    async fn head(&self, key: &StoreKey) -> StorageResult<ObjectMeta> {
        let req = ReadRequest { head_only: true, ..ReadRequest::default() };
        Ok(self.read(key, &req).await?.meta)
    }

    async fn put(&self, key: &StoreKey, body: Bytes, condition: &PutCondition) -> StorageResult<PutOutcome> {
        check_key(key.as_str())?;
        let current = match self.head(key).await {
            Ok(m) => Some(m),
            Err(StorageError::NotFound { .. }) => None,
            Err(StorageError::IsPrefix { .. }) => {
                return Err(StorageError::Conflict {
                    key: key.to_string(),
                    reason: "it is a prefix with keys below it".into(),
                })
            }
            Err(e) => return Err(e),
        };
        check_condition(key, condition, current.as_ref())?;
        let (this, owned, condition) = (self.clone(), key.clone(), condition.clone());
        let meta = tokio::task::spawn_blocking(move || {
            let how = match &condition {
                PutCondition::IfAbsent => Placement::Create,
                PutCondition::None => Placement::Replace,
                PutCondition::IfMatch(list) => Placement::ReplaceIf(list),
            };
            this.write_blocking(&owned, &body, how)
        })
        .await
        .map_err(|e| join_error(&e))??;
        Ok(PutOutcome { created: current.is_none(), etag: Some(meta.etag) })
    }

    async fn delete(&self, key: &StoreKey) -> StorageResult<()> {
        check_key(key.as_str())?;
        let (this, key) = (self.clone(), key.clone());
        tokio::task::spawn_blocking(move || this.delete_blocking(&key)).await.map_err(|e| join_error(&e))?
    }

    async fn list(&self, prefix: &KeyPrefix) -> StorageResult<Vec<ListEntry>> {
        check_key(prefix.as_str())?;
        let (this, prefix) = (self.clone(), prefix.clone());
        tokio::task::spawn_blocking(move || this.list_blocking(&prefix)).await.map_err(|e| join_error(&e))?
    }

    async fn list_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListEntry>, bool)> {
        check_key(prefix.as_str())?;
        let (this, prefix) = (self.clone(), prefix.clone());
        tokio::task::spawn_blocking(move || this.list_limited_blocking(&prefix, limit))
            .await
            .map_err(|e| join_error(&e))?
    }

    async fn list_names_limited(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<(Vec<ListName>, bool)> {
        check_key(prefix.as_str())?;
        let (this, prefix) = (self.clone(), prefix.clone());
        tokio::task::spawn_blocking(move || this.list_names_limited_blocking(&prefix, limit))
            .await
            .map_err(|e| join_error(&e))?
    }

    async fn list_recursive(&self, prefix: &KeyPrefix, limit: usize) -> StorageResult<Vec<(String, ObjectMeta)>> {
        check_key(prefix.as_str())?;
        let (this, prefix) = (self.clone(), prefix.clone());
        tokio::task::spawn_blocking(move || this.list_recursive_blocking(&prefix, limit))
            .await
            .map_err(|e| join_error(&e))?
    }

    async fn visit_recursive(&self, prefix: &KeyPrefix, visit: super::Visitor) -> StorageResult<super::Visitor> {
        check_key(prefix.as_str())?;
        let (this, prefix) = (self.clone(), prefix.clone());
        tokio::task::spawn_blocking(move || {
            let mut visit = visit;
            this.walk_blocking(&prefix, &mut |name, meta| {
                visit(name, &meta);
                true
            })?;
            Ok(visit)
        })
        .await
        .map_err(|e| join_error(&e))?
    }

    async fn is_prefix(&self, key: &StoreKey) -> StorageResult<bool> {
        // One confined open, inline, as reads are (see the module documentation).
        check_key(key.as_str())?;
        Ok(self.root.open_at(key.as_str(), OFlags::PATH | OFlags::DIRECTORY).is_ok())
    }

    async fn probe(&self) -> StorageResult<()> {
        let root = self.root.path().to_path_buf();
        match tokio::fs::metadata(&root).await {
            Ok(md) if md.is_dir() => Ok(()),
            Ok(_) => Err(StorageError::Unavailable { reason: format!("{} is not a directory", root.display()) }),
            Err(e) => Err(StorageError::Unavailable { reason: format!("{}: {e}", root.display()) }),
        }
    }

    fn cache_usage(&self) -> Option<super::CacheUsage> {
        self.cache.as_ref().map(|c| {
            // moka's counts lag until its housekeeping runs.
            c.run_pending_tasks();
            super::CacheUsage { entries: c.entry_count(), bytes: c.weighted_size() }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k).unwrap()
    }

    /// Every modification time this process gives its writes is later than
    /// the one before, even within one tick of the clock.
    #[test]
    fn unique_mtimes_always_move_on() {
        let ns = |t: rustix::fs::Timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        let mut last = ns(unique_mtime());
        for _ in 0..10_000 {
            let next = ns(unique_mtime());
            assert!(next > last, "{next} after {last}");
            last = next;
        }
    }

    /// A limited read keeps the first names in name order of those it
    /// accepts, whatever order the directory gives them in, and says when
    /// it accepted more.
    #[test]
    fn first_entries_are_the_smallest_accepted_names() {
        let dir = tempfile::tempdir().unwrap();
        for n in [7, 3, 11, 0, 5, 9, 1, 12, 4] {
            std::fs::write(dir.path().join(format!("n{n:02}")), b"").unwrap();
        }
        let d = rustix::fs::open(dir.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let odd = |name: &str, _: FileType| (name[1..].parse::<u32>().unwrap() % 2 == 1).then_some(());
        let names = |keep| {
            let (kept, more) = LocalBackend::first_entries(&d, "t", keep, odd).unwrap();
            (kept.into_iter().map(|(name, ())| name).collect::<Vec<_>>(), more)
        };
        assert_eq!(names(2), (vec!["n01".to_string(), "n03".to_string()], true));
        assert_eq!(names(5).0, ["n01", "n03", "n05", "n07", "n09"]);
        assert!(names(5).1, "n11 is accepted too");
        assert_eq!(names(6), (["n01", "n03", "n05", "n07", "n09", "n11"].map(String::from).to_vec(), false));
        assert!(!names(7).1);
        assert_eq!(names(0), (Vec::new(), true));
        let none = |_: &str, _: FileType| None::<()>;
        assert!(!LocalBackend::first_entries(&d, "t", 0, none).unwrap().1);
    }

    /// The `If-Match` check that holds across processes is the one made
    /// under the directory's lock, right before the rename: a version
    /// written after the writer's own check (by another process) makes the
    /// rename fail, and the lock excludes every other holder meanwhile.
    #[test]
    fn if_match_is_checked_again_under_the_directory_lock() {
        let dir = tempfile::tempdir().unwrap();
        let fd = |p: &std::path::Path| rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let d = fd(dir.path());
        std::fs::write(dir.path().join("k"), b"one").unwrap();
        let read = Validator::of(&rustix::fs::statat(&d, "k", AtFlags::empty()).unwrap()).meta().etag;
        // Another process replaces the key after this writer read it.
        std::fs::write(dir.path().join("other"), b"two").unwrap();
        std::fs::rename(dir.path().join("other"), dir.path().join("k")).unwrap();
        std::fs::write(dir.path().join("mine"), b"three").unwrap();
        let expected = [read];
        assert_eq!(place(d.as_fd(), "mine", d.as_fd(), "k", Placement::ReplaceIf(&expected)), Err(CHANGED));
        assert_eq!(std::fs::read(dir.path().join("k")).unwrap(), b"two");
        assert!(!dir.path().join("mine").exists(), "the staged file is removed");
        // With the current version it replaces.
        let now = [Validator::of(&rustix::fs::statat(&d, "k", AtFlags::empty()).unwrap()).meta().etag];
        std::fs::write(dir.path().join("mine"), b"three").unwrap();
        place(d.as_fd(), "mine", d.as_fd(), "k", Placement::ReplaceIf(&now)).unwrap();
        assert_eq!(std::fs::read(dir.path().join("k")).unwrap(), b"three");
        // Absent: If-Match fails.
        std::fs::write(dir.path().join("mine"), b"x").unwrap();
        assert_eq!(place(d.as_fd(), "mine", d.as_fd(), "gone", Placement::ReplaceIf(&now)), Err(CHANGED));
        // The lock excludes another open description of the directory (another process).
        let held = lock_dir(d.as_fd()).unwrap();
        let other = rustix::fs::openat(&d, ".", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert_eq!(
            rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive),
            Err(Errno::WOULDBLOCK)
        );
        drop(held);
        rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    }

    #[tokio::test]
    async fn cached_objects_follow_changes_made_behind_our_back() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"0123456789").unwrap();
        let whole = ReadRequest::default();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"0123456789");
        // Served from the cache, including ranges.
        let ranged = ReadRequest { range: Some(request::ByteRange::Suffix(3)), ..ReadRequest::default() };
        let out = b.read(&key("a"), &ranged).await.unwrap();
        assert_eq!((&out.body[..], out.range), (&b"789"[..], Some(7..10)));
        // Rewritten in place with the same size: ctime changes, the cache misses.
        std::fs::write(&path, b"abcdefghij").unwrap();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"abcdefghij");
        // Replaced by rename (as zarrd writes): a new inode.
        std::fs::write(dir.path().join("tmp"), b"XYZ").unwrap();
        std::fs::rename(dir.path().join("tmp"), &path).unwrap();
        assert_eq!(&b.read(&key("a"), &whole).await.unwrap().body[..], b"XYZ");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(b.read(&key("a"), &whole).await, Err(StorageError::NotFound { .. })));
    }

    #[tokio::test]
    async fn a_cached_object_is_never_served_through_a_link_that_leaves_the_mount() {
        let outer = tempfile::tempdir().unwrap();
        let (root, outside) = (outer.path().join("root"), outer.path().join("outside"));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("d/x"), b"inside").unwrap();
        std::fs::write(outside.join("x"), b"secret").unwrap();
        let b = LocalBackend::new(root.clone()).unwrap();
        let whole = ReadRequest::default();
        assert_eq!(&b.read(&key("d/x"), &whole).await.unwrap().body[..], b"inside");
        assert!(b.cache.as_ref().unwrap().get(&key("d/x")).is_some());
        // The directory becomes a link out of the mount: the cached entry's
        // name now leads to another file, so the confined open decides.
        std::fs::rename(root.join("d"), root.join("d_old")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        assert!(matches!(b.read(&key("d/x"), &whole).await, Err(StorageError::NotFound { .. })));
        // Back to a directory inside, with the very file: served again.
        std::fs::remove_file(root.join("d")).unwrap();
        std::fs::rename(root.join("d_old"), root.join("d")).unwrap();
        assert_eq!(&b.read(&key("d/x"), &whole).await.unwrap().body[..], b"inside");
        // The file itself replaced by a link to the outside file.
        std::fs::remove_file(root.join("d/x")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), root.join("d/x")).unwrap();
        assert!(matches!(b.read(&key("d/x"), &whole).await, Err(StorageError::NotFound { .. })));
    }

    /// With the cache on, a read starts with an unconfined `stat` and takes
    /// its "absent" answers as they are; with it off, only the confined open
    /// answers. Both must give every key the same answer, whatever links,
    /// files-as-directories and missing names are on the way.
    #[tokio::test]
    async fn the_first_stat_answers_as_the_confined_open_does() {
        let outer = tempfile::tempdir().unwrap();
        let (root, outside) = (outer.path().join("root"), outer.path().join("outside"));
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        std::fs::create_dir_all(outside.join("o")).unwrap();
        std::fs::write(root.join("d/x"), b"inside").unwrap();
        std::fs::write(outside.join("secret"), b"secret").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../outside", root.join("rel")).unwrap();
        std::os::unix::fs::symlink("d", root.join("alias")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        let cached = LocalBackend::new(root.clone()).unwrap();
        let direct =
            LocalBackend::with_cache(root, ObjectCacheSettings { capacity_bytes: 0, max_object_bytes: 0 }).unwrap();
        assert!(cached.cache.is_some() && direct.cache.is_none());
        let answer = |r: StorageResult<ReadOutcome>| match r {
            Ok(out) => format!("ok {:?}", out.body),
            Err(StorageError::NotFound { key }) => format!("not found {key}"),
            Err(StorageError::IsPrefix { key }) => format!("prefix {key}"),
            Err(e) => format!("other {e}"),
        };
        let keys = [
            "d/x",
            "d/missing",
            "missing/x",
            "d/x/below",
            "d/sub",
            "abs/secret",
            "abs/missing",
            "abs/o/missing",
            "rel/secret",
            "rel/missing",
            "alias/x",
            "alias/missing",
            "dangling",
            "dangling/x",
            "loop",
            "loop/x",
        ];
        let whole = ReadRequest::default();
        for k in keys {
            // Twice: the second read of a found object comes from the cache.
            for _ in 0..2 {
                let (a, b) = (answer(cached.read(&key(k), &whole).await), answer(direct.read(&key(k), &whole).await));
                assert_eq!(a, b, "{k}");
            }
        }
        assert_eq!(answer(cached.read(&key("alias/x"), &whole).await), "ok b\"inside\"");
        assert_eq!(answer(cached.read(&key("abs/secret"), &whole).await), "not found abs/secret");
    }

    #[tokio::test]
    async fn large_objects_are_not_cached_and_ranges_read_only_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let settings = ObjectCacheSettings { capacity_bytes: 1024, max_object_bytes: 16 };
        let b = LocalBackend::with_cache(dir.path().to_path_buf(), settings).unwrap();
        std::fs::write(dir.path().join("big"), vec![7u8; 100]).unwrap();
        let ranged = ReadRequest { range: Some(request::ByteRange::From(90)), ..ReadRequest::default() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert_eq!(out.body.len(), 10);
        assert!(b.cache.as_ref().unwrap().get(&key("big")).is_none());
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert!(matches!(b.read(&key("d"), &ReadRequest::default()).await, Err(StorageError::IsPrefix { .. })));
    }

    #[tokio::test]
    async fn by_default_objects_over_1_mib_are_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        std::fs::write(dir.path().join("small"), vec![1u8; 1024 * 1024]).unwrap();
        std::fs::write(dir.path().join("large"), vec![2u8; 1024 * 1024 + 1]).unwrap();
        for name in ["small", "large"] {
            let out = b.read(&key(name), &ReadRequest::default()).await.unwrap();
            assert_eq!(out.body.len(), std::fs::metadata(dir.path().join(name)).unwrap().len() as usize);
        }
        let cache = b.cache.as_ref().unwrap();
        assert!(cache.get(&key("small")).is_some());
        assert!(cache.get(&key("large")).is_none());
    }

    /// The bytes of a read, `body` and `tail` together.
    fn all_bytes(mut out: ReadOutcome) -> Vec<u8> {
        let mut bytes = out.body.to_vec();
        if let Some(Tail::File(tail)) = out.tail.as_mut() {
            while let Some(frame) = tail.next_frame(100_000).unwrap() {
                assert!(frame.len() <= 100_000);
                bytes.extend_from_slice(&frame);
            }
        }
        bytes
    }

    #[tokio::test]
    async fn streamed_reads_leave_large_uncached_bytes_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        let data: Vec<u8> = (0..6_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &data).unwrap();
        std::fs::write(dir.path().join("small"), &data[..1000]).unwrap();
        let stream = ReadRequest { stream: true, ..ReadRequest::default() };
        let out = b.read(&key("big"), &stream).await.unwrap();
        assert!(out.body.is_empty() && out.tail.is_some());
        assert_eq!(out.len(), data.len() as u64);
        assert_eq!(all_bytes(out), data);
        // A range: only its bytes, in the tail.
        let ranged =
            ReadRequest { range: Some(request::ByteRange::Bounded { first: 5, last: 4_500_004 }), ..stream.clone() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert_eq!(out.range, Some(5..4_500_005));
        assert!(out.tail.is_some());
        assert_eq!(all_bytes(out), &data[5..4_500_005]);
        // A range up to INLINE_READ_MAX comes whole.
        let ranged =
            ReadRequest { range: Some(request::ByteRange::Bounded { first: 5, last: 2_500_004 }), ..stream.clone() };
        let out = b.read(&key("big"), &ranged).await.unwrap();
        assert!(out.tail.is_none());
        assert_eq!(out.body, &data[5..2_500_005]);
        // Small or cached objects come whole; HEAD has no bytes at all.
        let out = b.read(&key("small"), &stream).await.unwrap();
        assert!(out.tail.is_none() && out.body.len() == 1000);
        let head = ReadRequest { head_only: true, ..ReadRequest::default() };
        let out = b.read(&key("big"), &head).await.unwrap();
        assert!(out.tail.is_none() && out.body.is_empty() && out.meta.size == data.len() as u64);
        // Preconditions are answered before any byte is read.
        let etag = b.read(&key("big"), &head).await.unwrap().meta.etag;
        let mut not_modified = stream.clone();
        not_modified.preconditions.if_none_match = Some(vec![etag]);
        assert!(matches!(b.read(&key("big"), &not_modified).await, Err(StorageError::NotModified { .. })));
        // Without `stream`, the same read is whole in `body`.
        let out = b.read(&key("big"), &ReadRequest::default()).await.unwrap();
        assert!(out.tail.is_none() && out.body.len() == data.len());
    }

    #[tokio::test]
    async fn a_file_truncated_under_a_streamed_read_is_an_error_not_short_data() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        std::fs::write(dir.path().join("big"), vec![3u8; 5_000_000]).unwrap();
        let stream = ReadRequest { stream: true, ..ReadRequest::default() };
        let Some(Tail::File(mut tail)) = b.read(&key("big"), &stream).await.unwrap().tail else { panic!("a file") };
        assert_eq!(tail.next_frame(1_000_000).unwrap().unwrap().len(), 1_000_000);
        std::fs::OpenOptions::new().write(true).open(dir.path().join("big")).unwrap().set_len(1_500_000).unwrap();
        assert!(matches!(tail.next_frame(1_000_000), Err(StorageError::Unavailable { .. })));
        assert!(tail.next_frame(1_000_000).unwrap().is_none(), "nothing after the error");
    }

    #[tokio::test]
    async fn bulk_reads_are_served_from_the_cache_but_never_fill_it() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::with_cache(dir.path().to_path_buf(), ObjectCacheSettings::default()).unwrap();
        std::fs::write(dir.path().join("a"), b"bytes of a").unwrap();
        let bulk = ReadRequest { bulk: true, ..ReadRequest::default() };
        assert_eq!(&b.read(&key("a"), &bulk).await.unwrap().body[..], b"bytes of a");
        assert!(b.cache.as_ref().unwrap().get(&key("a")).is_none());
        // An ordinary read fills it; a bulk read is then served from it.
        b.read(&key("a"), &ReadRequest::default()).await.unwrap();
        assert!(b.cache.as_ref().unwrap().get(&key("a")).is_some());
        assert_eq!(&b.read(&key("a"), &bulk).await.unwrap().body[..], b"bytes of a");
    }

    #[tokio::test]
    async fn writes_leave_nothing_in_staging_and_crash_debris_is_swept_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        for i in 0..3u8 {
            b.put(&key("a/c/0"), Bytes::from(vec![i; 10]), &PutCondition::None).await.unwrap();
        }
        b.put(&key("a/c/1"), Bytes::from_static(b"x"), &PutCondition::IfAbsent).await.unwrap();
        let staging = dir.path().join(STAGING_DIR);
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
        // The fallback without O_TMPFILE: named in the staging directory, then renamed.
        let parent = b.make_dirs(&key("a/c/2"), "a/c").unwrap();
        b.write_named(&parent, "2", b"named", Placement::Replace).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a/c/2")).unwrap(), b"named");
        assert_eq!(b.write_named(&parent, "2", b"again", Placement::Create).unwrap_err(), Errno::EXIST);
        assert_eq!(std::fs::read_dir(&staging).unwrap().count(), 0);
        // What a crash left: a dead process's file goes, this process's stays.
        std::fs::write(staging.join("999999999-0-1"), b"debris").unwrap();
        let own = staging.join(format!("{}-0-1", std::process::id()));
        std::fs::write(&own, b"in flight").unwrap();
        std::fs::write(dir.path().join("a/.zarrd-staging-1-2-3"), b"hidden").unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        let left: Vec<_> = std::fs::read_dir(&staging).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(left, [own]);
        // Staging names never show in listings.
        let names: Vec<String> = b
            .list(&KeyPrefix::root())
            .await
            .unwrap()
            .iter()
            .map(|e| super::super::object::entry_name(e).to_string())
            .collect();
        assert_eq!(names, ["a"]);
        let all = b.list_recursive(&KeyPrefix::root(), usize::MAX).await.unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a/c/0", "a/c/1", "a/c/2"]);
    }

    #[tokio::test]
    async fn recursive_listings_resolve_the_prefix_but_never_descend_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(dir.path().to_path_buf()).unwrap();
        b.put(&key("arr/c/0"), Bytes::from_static(b"0"), &PutCondition::None).await.unwrap();
        std::os::unix::fs::symlink("arr", dir.path().join("alias")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("arr/up")).unwrap();
        std::os::unix::fs::symlink("c/0", dir.path().join("arr/zero")).unwrap();
        let below = |p: &str| KeyPrefix::new(p).unwrap();
        let names = |v: Vec<(String, ObjectMeta)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(b.list_recursive(&below("alias"), 100).await.unwrap()), ["c/0", "zero"]);
        assert_eq!(names(b.list_recursive(&below(""), 100).await.unwrap()), ["arr/c/0", "arr/zero"]);
        assert_eq!(names(b.list_recursive(&below(""), 1).await.unwrap()).len(), 1);
        // A visit sees what the listing lists, holding nothing.
        for prefix in ["alias", "", "arr"] {
            let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let into = seen.clone();
            let visit: crate::storage::Visitor =
                Box::new(move |n, m| into.lock().unwrap().push((n.to_string(), m.size)));
            drop(b.visit_recursive(&below(prefix), visit).await.unwrap());
            let mut seen = seen.lock().unwrap().clone();
            seen.sort();
            let listed: Vec<(String, u64)> =
                b.list_recursive(&below(prefix), 100).await.unwrap().into_iter().map(|(n, m)| (n, m.size)).collect();
            assert_eq!(seen, listed, "{prefix}");
        }
        // The same ETag from a listing as from a read.
        let listed = b.list_recursive(&below("arr"), 100).await.unwrap();
        assert_eq!(listed[0].1.etag, b.head(&key("arr/c/0")).await.unwrap().etag);
        // Deleting the last key removes the directories it leaves empty.
        b.delete(&key("arr/c/0")).await.unwrap();
        assert!(!dir.path().join("arr/c").exists() && dir.path().join("arr").is_dir());
    }
}
