//! What the dataset browser shows of a place in a mount: the node there (an
//! array, a group, or nothing: a plain directory), and one page of what is
//! directly under it, each entry classified.
//!
//! A page costs one listing of the names under the prefix (sorted by name;
//! directories first, then objects other than Zarr's own documents) and,
//! for the entries on the page only, one open each through the metadata
//! cache (directories) or one look-up of the size (objects; at most
//! [`OPEN_CONCURRENCY`] at once): a group of 10,000 children shows its first
//! page after one listing and [`MAX_PAGE`] opens or look-ups at most. A
//! local directory's listing is its names and their types: no file of it is
//! looked up unless it is on the page.
//!
//! [`directory`] decides whether a place that is no Zarr node is a plain
//! directory, as `/api/v1/nodes` describes it: the mount's root, or a
//! prefix with something under it, and no ancestor an array (a chunk
//! folder inside an array is part of the array, not a node).
//!
//! Memory of a page: the listing of the names under the prefix, held while
//! the page is made (about `70 + 2 * name` bytes per entry directly under
//! it: 100,000 entries are about 10 MB; a local directory is read name by
//! name, holding only those), and the opened nodes of the
//! page's directories (at most [`MAX_PAGE`], through the metadata cache).
//! The answer holds one page.

use futures::stream::{self, StreamExt};

use crate::service::node::{self, Node};
use crate::service::wire::zarr_name;
use crate::service::{NodeRef, ServiceError, ServiceResult};
use crate::storage::{ListName, StorageError};
use crate::zarr::array::ZarrFormat;

/// The most entries one page holds.
pub const MAX_PAGE: usize = 1000;
/// Children opened at once to classify them.
const OPEN_CONCURRENCY: usize = 16;

/// Zarr's own documents, not listed as entries.
const DOCUMENTS: &[&str] = &["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// An array: its shape and data type (Zarr's name).
    Array { shape: Vec<u64>, data_type: String, zarr_format: u8 },
    /// A group.
    Group { zarr_format: u8 },
    /// A directory (a prefix) that is not a Zarr node.
    Directory,
    /// A directory with nothing in it (a local mount's empty folder): no
    /// place to browse (describing it is 404, as on object stores, where
    /// it could not exist).
    EmptyDirectory,
    /// A directory whose metadata could not be read (the reason).
    Unreadable(String),
    /// An object (a file) and its size.
    Object { size: u64 },
}

/// One entry of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (the last segment).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// One page of a place's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The entries on this page.
    pub entries: Vec<Entry>,
    /// Entries in all (directories and objects).
    pub total: usize,
    /// Zero-based page number.
    pub page: usize,
    /// Entries a page holds.
    pub per_page: usize,
    /// Whether a `.zmetadata` document is there (v2 consolidated metadata).
    pub has_zmetadata: bool,
    /// Whether the listing stopped at `limits.max_list_entries` names:
    /// `total` and the pages then count only those.
    pub truncated: bool,
}

/// The node at `at`, or `None` for a plain directory (or a path with
/// nothing under it: an empty page).
///
/// # Errors
/// Storage failures; stored metadata that does not parse.
pub async fn node_at(at: &NodeRef<'_>) -> ServiceResult<Option<Node>> {
    match node::open(at).await {
        Ok(n) => Ok(Some(n)),
        Err(ServiceError::NodeNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the place `at`, where no Zarr node is, is a plain directory: the
/// mount's root (even empty), or a prefix with something under it, when no
/// ancestor (the root included) is an array. One open per ancestor
/// (through the metadata cache) and, unless at the root, one listing.
///
/// # Errors
/// Storage failures; an ancestor's stored metadata that does not parse.
pub async fn directory(at: &NodeRef<'_>) -> ServiceResult<bool> {
    if node::array_ancestor(at).await?.is_some() {
        return Ok(false);
    }
    if at.path().is_root() {
        return Ok(true);
    }
    holds_anything(at).await
}

/// Whether anything is stored under the place `at`: one entry is enough (a
/// local directory reads its names, and looks none up beyond the first).
async fn holds_anything(at: &NodeRef<'_>) -> ServiceResult<bool> {
    let (entries, more) = at.mount().mount().storage().list_names_limited(&at.path().prefix()?, 1).await?;
    Ok(!entries.is_empty() || more)
}

/// The number of a metadata format: 2 or 3.
#[must_use]
pub fn format_number(f: ZarrFormat) -> u8 {
    match f {
        ZarrFormat::V2 => 2,
        ZarrFormat::V3 => 3,
    }
}

fn kind_of(node: &Node) -> EntryKind {
    match node {
        Node::Array(a) => EntryKind::Array {
            shape: a.desc.shape.clone(),
            data_type: zarr_name(&a.desc.data_type),
            zarr_format: format_number(a.format()),
        },
        Node::Group(g) => EntryKind::Group { zarr_format: format_number(g.format) },
    }
}

/// Page `page` (zero-based) of what is directly under `at`, `per_page`
/// entries a page (at most [`MAX_PAGE`]), out of the first
/// `limits.max_list_entries` entries in name order (as a store listing:
/// a directory of millions of files costs a bounded listing).
///
/// # Errors
/// Storage failures listing the prefix.
pub async fn page(at: &NodeRef<'_>, page: usize, per_page: usize) -> ServiceResult<Page> {
    let per_page = per_page.clamp(1, MAX_PAGE);
    let limit = at.app().config().limits.max_list_entries;
    let prefix = at.path().prefix()?;
    let storage = at.mount().mount().storage();
    let (listing, truncated) = storage.list_names_limited(&prefix, limit).await?;
    let mut dirs = Vec::new();
    let mut objects = Vec::new();
    let mut has_zmetadata = false;
    for ListName { name, prefix, size } in listing {
        if prefix {
            dirs.push(name);
        } else {
            has_zmetadata |= name == ".zmetadata";
            if !DOCUMENTS.contains(&name.as_str()) {
                objects.push((name, size));
            }
        }
    }
    dirs.sort_unstable();
    objects.sort_unstable();
    let total = dirs.len() + objects.len();
    let start = page.saturating_mul(per_page).min(total);
    let end = start.saturating_add(per_page).min(total);
    let app = at.app();
    let mount_name = at.mount_name();
    let on_page_dirs: Vec<String> = dirs.iter().skip(start).take(end - start).cloned().collect();
    let classify = on_page_dirs.into_iter().map(|name| async move {
        let kind = match at.path().child(&name) {
            Err(e) => EntryKind::Unreadable(e.to_string()),
            Ok(path) => match app.node(mount_name, &path) {
                Err(e) => EntryKind::Unreadable(e.to_string()),
                Ok(child) => match node_at(&child).await {
                    Ok(Some(n)) => kind_of(&n),
                    Ok(None) => match holds_anything(&child).await {
                        Ok(true) => EntryKind::Directory,
                        Ok(false) => EntryKind::EmptyDirectory,
                        Err(e) => EntryKind::Unreadable(e.to_string()),
                    },
                    Err(e) => EntryKind::Unreadable(e.to_string()),
                },
            },
        };
        Entry { name, kind }
    });
    let mut entries: Vec<Entry> = stream::iter(classify).buffered(OPEN_CONCURRENCY).collect().await;
    let first_object = start.saturating_sub(dirs.len());
    let objects_wanted = (end - start) - entries.len();
    // Only the objects shown are looked up (a listing of names has no
    // sizes); one gone meanwhile is left out.
    let sized = objects.into_iter().skip(first_object).take(objects_wanted).map(|(name, size)| {
        let prefix = &prefix;
        async move {
            let kind = match size {
                Some(size) => EntryKind::Object { size },
                None => match prefix.child(&name) {
                    Err(e) => EntryKind::Unreadable(e.to_string()),
                    Ok(key) => match storage.head(&key).await {
                        Ok(meta) => EntryKind::Object { size: meta.size },
                        Err(StorageError::NotFound { .. } | StorageError::IsPrefix { .. }) => return None,
                        Err(e) => EntryKind::Unreadable(e.to_string()),
                    },
                },
            };
            Some(Entry { name, kind })
        }
    });
    entries.extend(
        stream::iter(sized).buffered(OPEN_CONCURRENCY).filter_map(std::future::ready).collect::<Vec<_>>().await,
    );
    Ok(Page { entries, total, page, per_page, has_zmetadata, truncated })
}
