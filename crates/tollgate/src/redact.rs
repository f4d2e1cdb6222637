//! Store URLs in messages without their credentials.

/// `url` with its password replaced by `***`, for error messages and logs:
/// the user name is kept (`redis://app:pw@host:6379/1` becomes
/// `redis://app:***@host:6379/1`, `redis://:pw@host` becomes
/// `redis://:***@host`), and credentials without a `:`, which some clients
/// read as a password, are hidden whole (`redis://pw@host` becomes
/// `redis://***@host`). The credentials end at the last `@`, so a password
/// holding `@` or `/` is hidden whole too. Text that is not a URL with
/// credentials is returned unchanged.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let start = scheme_end + 3;
            let hidden = match url[start..at].find(':') {
                Some(colon) => start + colon + 1,
                None => start,
            };
            format!("{}***{}", &url[..hidden], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_the_password_and_keeps_the_user() {
        assert_eq!(redact_url("redis://:secret@host:1/2"), "redis://:***@host:1/2");
        assert_eq!(redact_url("rediss://u:p@h"), "rediss://u:***@h");
        assert_eq!(redact_url("redis://app:p@ss/w:rd@h:1/0"), "redis://app:***@h:1/0");
        assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("redis+unix:///tmp/r.sock"), "redis+unix:///tmp/r.sock");
        assert_eq!(redact_url("nonsense"), "nonsense");
    }
}
