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
//! | [`versioned`] | conditional rewrites of documents, retried when another process wins |
//!
//! Each mutation does what zarr-python does to the store for the same call,
//! so a zarr-python user sees the same keys and documents (the files say
//! how). Concurrency: every mutation holds the node's exclusive lock
//! ([`super::locks::MountLocks::exclusive`]) for its whole duration, and
//! invalidates the metadata cache for the paths it writes; across
//! processes every document it rewrites is written on the condition that
//! it is still the version read, and the operation is retried from a
//! fresh read when another process won ([`versioned`]).

pub mod attributes;
pub mod consolidate;
pub mod create;
pub mod delete;
pub mod describe;
pub mod documents;
pub mod open;
pub mod path;
pub mod resize;
pub mod versioned;

pub use attributes::{update_attributes, AttributeUpdate};
pub use consolidate::consolidate;
pub use create::{create, parse_create_body, Created, NewNode, OpenMode};
pub use delete::delete;
pub use describe::{children, describe, stats, ArrayFacts, Child, Children, Stats};
pub use documents::{json_len, node_of_document_key, DocumentGate, DOCUMENT_NAMES, PARSE_COST_FACTOR};
pub use open::{
    array_ancestor, array_limits, load, open, open_array, open_in, open_in_with, read_document, ArrayNode, GroupNode,
    Node, Validator,
};
pub use path::NodePath;
pub use resize::{resize, Resize};

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;
    use crate::config::Config;
    use crate::service::{App, ServiceError};
    use crate::storage::mount::MountSpec;
    use crate::storage::Mount;

    fn app() -> App {
        let spec = |read_only: bool| {
            serde_json::from_value::<MountSpec>(json!({"url": "memory://", "read_only": read_only})).unwrap()
        };
        App::with_mounts(
            Config::default(),
            vec![Mount::build("rw", &spec(false)).unwrap(), Mount::build("ro", &spec(true)).unwrap()],
        )
    }

    #[tokio::test]
    async fn operations_run_on_a_resolved_node_and_every_mutation_asks_writable() {
        let app = app();
        let path = NodePath::new("g/a").unwrap();
        let node = app.node("rw", &path).unwrap();
        let (new, _) = parse_create_body(&json!({"driver": "zarr3", "dtype": "uint8", "shape": [4]})).unwrap();
        let created = create(&node, &new, OpenMode::default()).await.unwrap();
        assert!(created.created);
        assert!(matches!(open(&app.node("rw", &NodePath::new("g").unwrap()).unwrap()).await, Ok(Node::Group(_))));
        assert_eq!(open_array(&node).await.unwrap().desc.shape, vec![4]);
        let (array, _) =
            resize(&node, &Resize { shape: vec![8], expand_only: true, shrink_only: false }).await.unwrap();
        assert_eq!(array.desc.shape, vec![8]);
        let e = consolidate(&node).await.unwrap_err();
        assert!(matches!(&e, ServiceError::NotAGroup { path, .. } if path == "g/a"), "{e}");
        delete(&node, false).await.unwrap();
        assert!(matches!(open(&node).await, Err(ServiceError::NodeNotFound { .. })));

        // A read-only mount refuses every mutation, through the one check.
        let ro = app.node("ro", &path).unwrap();
        let read_only = |r: Result<(), ServiceError>| matches!(r, Err(ServiceError::ReadOnly(m)) if m == "ro");
        assert!(read_only(create(&ro, &new, OpenMode::default()).await.map(drop)));
        assert!(read_only(delete(&ro, true).await));
        assert!(read_only(update_attributes(&ro, Map::new(), AttributeUpdate::Merge).await.map(drop)));
        assert!(read_only(
            resize(&ro, &Resize { shape: vec![1], expand_only: false, shrink_only: false }).await.map(drop)
        ));
        assert!(read_only(consolidate(&ro).await.map(drop)));
        assert!(matches!(open(&ro).await, Err(ServiceError::NodeNotFound { .. })), "reads need no write access");
    }
}
