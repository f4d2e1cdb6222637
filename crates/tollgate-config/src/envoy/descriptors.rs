//! The descriptor tree of a domain and the names it gives resources and
//! keys (see the [module](crate::envoy) for the rules).

use std::collections::HashMap;

/// One level of a configured path: a descriptor key and, optionally, the
/// value it must have (with `*` anywhere for wildcards).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Step {
    pub(crate) key: String,
    pub(crate) value: Option<String>,
}

/// The resource name of the limit at `path` under `domain`.
pub(crate) fn resource_name(domain: &str, path: &[Step]) -> String {
    let mut out = String::with_capacity(domain.len() + 16 * path.len());
    escape_into(domain, &mut out);
    for step in path {
        out.push('.');
        escape_into(&step.key, &mut out);
        if let Some(value) = &step.value {
            out.push('=');
            escape_into(value, &mut out);
        }
    }
    out
}

/// The limiter key of a request descriptor: its values, escaped (`\\`, `.`
/// and `=` behind a backslash) and joined by `.`, so that different value
/// lists never share a key.
pub fn descriptor_key<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = String::new();
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        escape_into(value, &mut out);
    }
    out.into_bytes()
}

/// Appends `part` with `\`, `.` and `=` escaped by a backslash.
fn escape_into(part: &str, out: &mut String) {
    for c in part.chars() {
        if matches!(c, '\\' | '.' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A level of a domain's tree: its nodes by `key` (no value) and by
/// `(key, value)`, and the wildcard nodes in the order configured.
#[derive(Debug)]
pub(crate) struct Level<T> {
    exact: HashMap<String, HashMap<String, Node<T>>>,
    any_value: HashMap<String, Node<T>>,
    patterns: Vec<Pattern<T>>,
}

impl<T> Default for Level<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            any_value: HashMap::new(),
            patterns: Vec::new(),
        }
    }
}

/// A node whose value has wildcards: `*` anywhere, each matching any run of
/// characters, none included.
#[derive(Debug)]
struct Pattern<T> {
    key: String,
    /// The value as configured, `*` included.
    value: String,
    /// The value split at each `*`.
    parts: Vec<String>,
    /// `share_threshold`: every value it matches counts as one (the
    /// pattern stands for the value in the key).
    share: bool,
    node: Node<T>,
}

impl<T> Pattern<T> {
    /// Whether `value` matches: it starts with the first part, ends with
    /// the last, and holds the others in order between them.
    fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(split) => split,
            None => return value.is_empty(),
        };
        let Some((last, middle)) = rest.split_last() else {
            return value == first;
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
            return false;
        }
        let mut between = &value[first.len()..value.len() - last.len()];
        for part in middle {
            match between.find(part.as_str()) {
                Some(at) => between = &between[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A node: what applies when a descriptor ends here, and the next level
/// (boxed, and none for a leaf: most nodes of a large file are leaves).
#[derive(Debug)]
pub(crate) struct Node<T> {
    pub(crate) rule: Option<T>,
    children: Option<Box<Level<T>>>,
}

impl<T> Node<T> {
    /// A node with `rule` and the nodes of `children` below it.
    pub(crate) fn new(rule: Option<T>, children: Level<T>) -> Self {
        let empty =
            children.exact.is_empty() && children.any_value.is_empty() && children.patterns.is_empty();
        Self {
            rule,
            children: (!empty).then(|| Box::new(children)),
        }
    }
}

impl<T> Level<T> {
    /// Adds the node for `step`, whose values share one count when `share`
    /// (`share_threshold`, for a value with `*`); `false` if the level
    /// already has one for the same key and value.
    pub(crate) fn insert(&mut self, step: &Step, node: Node<T>, share: bool) -> bool {
        match &step.value {
            None => {
                if self.any_value.contains_key(&step.key) {
                    return false;
                }
                self.any_value.insert(step.key.clone(), node);
            }
            Some(value) if value.contains('*') => {
                if self
                    .patterns
                    .iter()
                    .any(|p| p.key == step.key && p.value == *value)
                {
                    return false;
                }
                self.patterns.push(Pattern {
                    key: step.key.clone(),
                    value: value.clone(),
                    parts: value.split('*').map(str::to_owned).collect(),
                    share,
                    node,
                });
            }
            Some(value) => {
                let values = self.exact.entry(step.key.clone()).or_default();
                if values.contains_key(value) {
                    return false;
                }
                values.insert(value.clone(), node);
            }
        }
        true
    }

    /// The node for one entry: exact value, then the first wildcard value
    /// that matches, then key alone; with the pattern that stands for the
    /// value in the key when that wildcard shares one count.
    fn child(&self, key: &str, value: &str) -> Option<(&Node<T>, Option<&str>)> {
        if let Some(node) = self.exact.get(key).and_then(|values| values.get(value)) {
            return Some((node, None));
        }
        if let Some(p) = self.patterns.iter().find(|p| p.key == key && p.matches(value)) {
            return Some((&p.node, p.share.then_some(p.value.as_str())));
        }
        self.any_value.get(key).map(|node| (node, None))
    }

    /// What applies to a descriptor of `entries`: the rule of the node its
    /// last entry reaches, if that node has one.
    pub(crate) fn find<'e>(&self, entries: impl IntoIterator<Item = (&'e str, &'e str)>) -> Option<&T> {
        self.find_keyed(entries).map(|(rule, _)| rule)
    }

    /// [`Self::find`], with the limiter key of the descriptor: its values
    /// ([`descriptor_key`]), each matched by a wildcard that shares one
    /// count (`share_threshold`) standing as the wildcard.
    pub(crate) fn find_keyed<'e>(
        &self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Option<(&T, Vec<u8>)> {
        let mut level = Some(self);
        let mut reached = None;
        let mut values: Vec<&str> = Vec::new();
        for (key, value) in entries {
            let (node, shared) = level?.child(key, value)?;
            values.push(shared.unwrap_or(value));
            reached = Some(node);
            level = node.children.as_deref();
        }
        let rule = reached.and_then(|node| node.rule.as_ref())?;
        Some((rule, descriptor_key(values)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(key: &str, value: Option<&str>) -> Step {
        Step {
            key: key.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    fn leaf(rule: &'static str) -> Node<&'static str> {
        Node::new(Some(rule), Level::default())
    }

    /// Envoy's "messaging" example: a nested per-number limit for marketing
    /// messages, a per-number limit for all, a blocked address.
    fn messaging() -> Level<&'static str> {
        let mut marketing = Level::default();
        assert!(marketing.insert(&step("to_number", None), leaf("marketing per number"), false));
        let mut root = Level::default();
        assert!(root.insert(
            &step("message_type", Some("marketing")),
            Node::new(None, marketing),
            false
        ));
        assert!(root.insert(&step("to_number", None), leaf("per number"), false));
        assert!(root.insert(&step("remote_address", None), leaf("per address"), false));
        assert!(root.insert(&step("remote_address", Some("50.0.0.5")), leaf("blocked"), false));
        assert!(root.insert(&step("path", Some("/api/*")), leaf("api prefix"), false));
        root
    }

    #[test]
    fn the_most_specific_node_of_the_full_depth_applies() {
        let root = messaging();
        assert_eq!(root.find([("to_number", "2061111111")]), Some(&"per number"));
        assert_eq!(
            root.find([("message_type", "marketing"), ("to_number", "2061111111")]),
            Some(&"marketing per number")
        );
        assert_eq!(root.find([("remote_address", "50.0.0.1")]), Some(&"per address"));
        assert_eq!(root.find([("remote_address", "50.0.0.5")]), Some(&"blocked"));
        assert_eq!(root.find([("path", "/api/users")]), Some(&"api prefix"));
    }

    #[test]
    fn descriptors_of_another_depth_or_unknown_keys_match_nothing() {
        let root = messaging();
        // The placeholder level has no limit of its own.
        assert_eq!(root.find([("message_type", "marketing")]), None);
        // One entry too many.
        assert_eq!(root.find([("to_number", "1"), ("extra", "x")]), None);
        assert_eq!(root.find([("message_type", "other"), ("to_number", "1")]), None);
        assert_eq!(root.find([("unknown", "x")]), None);
        assert_eq!(root.find([("path", "/other")]), None);
        assert_eq!(root.find(std::iter::empty()), None);
    }

    #[test]
    fn a_level_refuses_the_same_key_and_value_twice() {
        let mut root = messaging();
        assert!(!root.insert(&step("to_number", None), leaf("again"), false));
        assert!(!root.insert(&step("remote_address", Some("50.0.0.5")), leaf("again"), false));
        assert!(!root.insert(&step("path", Some("/api/*")), leaf("again"), false));
        assert!(root.insert(&step("to_number", Some("1")), leaf("a value of its own"), false));
    }

    /// envoyproxy/ratelimit's wildcards: `*` anywhere, several in one
    /// value, each matching any run of characters (none included); the
    /// first configured that matches wins, after an exact value.
    #[test]
    fn wildcards_match_anywhere_in_a_value() {
        let mut root = Level::default();
        for (value, rule) in [
            ("bar*b", "middle"),
            ("foo*bar*baz", "several"),
            ("files/*", "trailing"),
            ("*.pdf", "leading"),
        ] {
            assert!(root.insert(&step("path", Some(value)), leaf(rule), false));
        }
        assert!(root.insert(&step("path", Some("files/exact")), leaf("exact"), false));
        let found = |value| root.find([("path", value)]).copied();
        assert_eq!(found("barb"), Some("middle"));
        assert_eq!(found("bar-and-b"), Some("middle"));
        assert_eq!(found("bar"), None, "the fixed parts need their own characters");
        assert_eq!(found("barbx"), None);
        assert_eq!(found("foobarbaz"), Some("several"));
        assert_eq!(found("foo-1-bar-2-baz"), Some("several"));
        assert_eq!(found("foo-baz-bar"), None, "the parts in order");
        assert_eq!(
            found("files/a.pdf"),
            Some("trailing"),
            "the first configured wins"
        );
        assert_eq!(found("files/exact"), Some("exact"));
        assert_eq!(found("docs/a.pdf"), Some("leading"));
        assert_eq!(found("x"), None);
    }

    /// `share_threshold`: every value a wildcard matches has one key, the
    /// wildcard's; without it each value has its own.
    #[test]
    fn a_shared_wildcard_gives_its_values_one_key() {
        let mut root = Level::default();
        assert!(root.insert(&step("files", Some("a/*")), leaf("shared"), true));
        assert!(root.insert(&step("files", Some("b/*")), leaf("own"), false));
        let key = |value| root.find_keyed([("files", value)]).map(|(_, key)| key);
        assert_eq!(key("a/1.pdf"), key("a/2.csv"));
        assert_eq!(key("a/1.pdf"), Some(descriptor_key(["a/*"])));
        assert_ne!(key("b/1.pdf"), key("b/2.csv"));
    }

    #[test]
    fn resource_names_keep_domains_keys_and_values_apart() {
        assert_eq!(
            resource_name(
                "messaging",
                &[step("message_type", Some("marketing")), step("to_number", None)]
            ),
            "messaging.message_type=marketing.to_number"
        );
        // Separators inside names are escaped, so these paths differ.
        let names = [
            resource_name("a.b", &[step("c", None)]),
            resource_name("a", &[step("b", None), step("c", None)]),
            resource_name("a", &[step("b", Some("c"))]),
            resource_name("a", &[step("b=c", None)]),
            resource_name("a", &[step("b\\", Some("c"))]),
        ];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn keys_are_the_values_joined_without_ambiguity() {
        assert_eq!(descriptor_key(["1.2.3.4"]), b"1\\.2\\.3\\.4".to_vec());
        assert_eq!(descriptor_key(["marketing", "206"]), b"marketing.206".to_vec());
        assert_ne!(descriptor_key(["a.b"]), descriptor_key(["a", "b"]));
        assert_ne!(descriptor_key(["a\\", "b"]), descriptor_key(["a\\.b"]));
    }

    proptest::proptest! {
        #[test]
        fn different_value_lists_get_different_keys(
            a in proptest::collection::vec("[a.\\\\=]{0,3}", 1..4),
            b in proptest::collection::vec("[a.\\\\=]{0,3}", 1..4),
        ) {
            let key = |v: &Vec<String>| descriptor_key(v.iter().map(String::as_str));
            proptest::prop_assert_eq!(key(&a) == key(&b), a == b);
        }
    }
}
