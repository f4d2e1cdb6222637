//! The policies deploy/kubernetes/ and the container image ship are valid
//! as the service loads them: the ConfigMap's files together (a policy
//! file and an Envoy rate-limit file), and the image's default file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tollgate_config::PolicySet;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn the_configmap_and_the_image_hold_valid_policies() {
    #[derive(serde::Deserialize)]
    struct ConfigMap {
        kind: String,
        data: BTreeMap<String, String>,
    }
    let text = std::fs::read_to_string(repository().join("deploy/kubernetes/configmap.yaml")).unwrap();
    let map: ConfigMap = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(map.kind, "ConfigMap");
    assert_eq!(
        map.data.keys().collect::<Vec<_>>(),
        ["policies.yaml", "ratelimit.yaml"],
        "the files deployment.yaml passes to --config"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, text) in &map.data {
        files.push(dir.path().join(name));
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let set = PolicySet::load(&files)
        .await
        .unwrap_or_else(|err| panic!("the ConfigMap: {err}"));
    let login = |set: &PolicySet| set.policies().unwrap().limiter("login").policy().limits()[0].limit();
    assert_eq!(login(&set), 5);
    assert!(set.domain("edge").is_some(), "the Envoy example's domain");

    let image = repository().join("deploy/container/policies.yaml");
    let set = PolicySet::load(&[image])
        .await
        .unwrap_or_else(|err| panic!("the image's policies: {err}"));
    assert_eq!(login(&set), 5);
}
