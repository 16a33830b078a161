//! Node operations: one file per operation on arrays and groups, each
//! taking the [`NodeRef`](super::NodeRef) the request resolved.
//!
//! | file | what it does |
//! |---|---|
//! | [`path`] | [`NodePath`]: a node's validated path inside its mount |
//! | [`open`] | reading a node's documents into an [`ArrayNode`] or [`GroupNode`] ([`open()`], [`open_array`]) |
//! | [`documents`] | the metadata documents: the [`DocumentGate`] every parse passes, and checked writes |
//! | [`describe`] | statistics, children and the TensorStore schema of an opened node |
//! | [`create`] | create (or open, or replace) a node, with its missing parent groups |
//! | [`delete`] | delete a node and everything under it |
//! | [`attributes`] | replace or merge a node's attributes |
//! | [`resize`] | change an array's shape, deleting chunks wholly outside it |
//! | [`consolidate`] | write a group's consolidated metadata |
//!
//! Each mutation does what zarr-python does to the store for the same call,
//! so a zarr-python user sees the same keys and documents (the files say
//! how). Concurrency: every mutation holds the node's exclusive lock
//! ([`super::locks::MountLocks::exclusive`]) for its whole duration, and
//! invalidates the metadata cache for the paths it writes.

pub mod attributes;
pub mod consolidate;
pub mod create;
pub mod delete;
pub mod describe;
pub mod documents;
pub mod open;
pub mod path;
pub mod resize;

pub use attributes::{update_attributes, AttributeUpdate};
pub use consolidate::consolidate;
pub use create::{create, parse_create_body, Created, NewNode, OpenMode};
pub use delete::{delete, DELETE_CONCURRENCY};
pub use describe::{children, describe, stats, tensorstore_schema, ArrayFacts, Child, Children, Stats};
pub use documents::{json_len, node_of_document_key, DocumentGate, DOCUMENT_NAMES, PARSE_COST_FACTOR};
pub use open::{
    array_limits, load, open, open_array, open_in, open_in_with, read_optional, ArrayNode, GroupNode, Node, Validator,
};
pub use path::NodePath;
pub use resize::{resize, Resize};
