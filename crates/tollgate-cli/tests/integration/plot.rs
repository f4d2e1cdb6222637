//! `simulate --plot`: the chart file is written in the format its extension
//! names, is well-formed, shows every strategy replayed for the right key,
//! and bad flags fail cleanly without leaving a file.

use std::path::Path;

use crate::support::*;
use tollgate::Strategy;

/// `simulate` on the sample trace with `strategy`, limit 10 per 10 s.
fn sample(strategy: &str) -> Tollgate {
    Tollgate::simulate()
        .trace(example("sample.csv"))
        .strategy(strategy)
        .limit(10)
        .window("10s")
}

/// Every text node of an SVG document, which must be well-formed XML.
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("invalid XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_owned())
        .collect()
}

/// The width and height of a PNG file, after checking its signature.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 1000, "a chart is more than a header");
    assert_eq!(bytes[..8], *b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The key with the most requests in the sample (ties to the first seen).
fn busiest_sample_key() -> (String, usize) {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (_, r) in sample_requests() {
        match counts.iter_mut().find(|(k, _)| *k == r.key) {
            Some((_, n)) => *n += 1,
            None => counts.push((r.key, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max().unwrap();
    counts.into_iter().find(|(_, n)| *n == best).unwrap()
}

#[test]
fn svg_chart_is_well_formed_and_has_a_panel_per_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("chart.svg");
    let with_plot = sample("all").plot(&svg).run_ok();
    // The chart changes nothing on stdout.
    assert_eq!(with_plot, sample("all").run_ok());
    let texts = svg_texts(&svg);
    let (key, requests) = busiest_sample_key();
    assert_eq!(
        texts[0],
        format!("key {key}: {requests} requests (the busiest key), limit 10 per 10s")
    );
    for strategy in Strategy::ALL {
        let captions: Vec<_> = texts
            .iter()
            .filter(|t| t.starts_with(&format!("{}: ", strategy.name())))
            .collect();
        assert_eq!(captions.len(), 1, "{strategy}: {texts:?}");
    }
    assert!(texts.iter().any(|t| t == "seconds since the trace's start"));
    assert_eq!(file_names(dir.path()), ["chart.svg"]);
}

#[test]
fn png_chart_has_the_signature_and_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("chart.png");
    sample("all").plot(&png).args(["--plot-size", "800x600"]).run_ok();
    assert_eq!(png_size(&png), (800, 600));
    // The default: 1000 wide, 260 per panel plus 70 for the title.
    let upper = dir.path().join("chart.PNG");
    sample("all").plot(&upper).run_ok();
    assert_eq!(png_size(&upper), (1000, 4 * 260 + 70));
    let one = dir.path().join("one.png");
    sample("token_bucket").plot(&one).run_ok();
    assert_eq!(png_size(&one), (1000, 260 + 70));
    // The smallest size draws without failing.
    sample("all").plot(&png).args(["--plot-size", "320x240"]).run_ok();
    assert_eq!(png_size(&png), (320, 240));
}

#[test]
fn key_picks_the_plotted_key_and_the_peak_matches_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("k.svg");
    // The summary names the key with the largest burst per strategy; its
    // chart's peak must be that burst.
    let summary = sample("all").run_ok();
    for line in summary.lines().skip(2) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let (strategy, peak, key) = (cells[0], cells[4], cells[5]);
        sample(strategy).plot(&svg).key(key).run_ok();
        let texts = svg_texts(&svg);
        assert!(texts[0].starts_with(&format!("key {key}: ")), "{texts:?}");
        assert!(!texts[0].contains("busiest"), "{texts:?}");
        let caption = texts
            .iter()
            .find(|t| t.starts_with(&format!("{strategy}: ")))
            .unwrap_or_else(|| panic!("no {strategy} panel in {texts:?}"));
        assert!(caption.ends_with(&format!(", peak {peak} in 10s")), "{caption}");
        // Only the strategy replayed is drawn.
        for other in Strategy::ALL.iter().filter(|s| s.name() != strategy) {
            assert!(
                !texts
                    .iter()
                    .any(|t| t.starts_with(&format!("{}: ", other.name()))),
                "{other} drawn: {texts:?}"
            );
        }
    }
}

#[test]
fn bad_plot_flags_fail_cleanly_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (jpg, none, svg) = (path("chart.jpg"), path("chart"), path("chart.svg"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--plot", &jpg], "error: invalid --plot"),
        (vec!["--plot", &none], "must end in .svg or .png"),
        (
            vec!["--plot", &svg, "--key", "10.9.9.9"],
            "error: invalid --key 10.9.9.9: no request in the trace has this key",
        ),
        (vec!["--plot", &svg, "--plot-size", "10x10"], "--plot-size"),
        (vec!["--plot", &svg, "--plot-size", "wide"], "WIDTHxHEIGHT"),
    ];
    for (extra, message) in cases {
        let out = sample("all").args(&extra).run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}");
        assert_ne!(out.status.code(), Some(101), "{extra:?} panicked: {stderr}");
        assert!(
            stderr.contains(message),
            "{extra:?}: expected {message:?} in {stderr}"
        );
        assert!(out.stdout.is_empty(), "{extra:?}");
        assert_eq!(file_names(dir.path()), Vec::<String>::new(), "{extra:?}");
    }
    assert!(String::from_utf8_lossy(&sample("all").plot(&jpg).run().stderr).contains(".jpg"));
    // --key and --plot-size mean nothing without --plot.
    for extra in [["--key", "10.0.0.3"], ["--plot-size", "800x600"]] {
        let out = sample("all").args(&extra).run();
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--plot"));
    }
}

#[test]
fn nothing_is_plotted_when_the_trace_is_empty_invalid_or_the_directory_missing() {
    let dir = tempfile::tempdir().unwrap();
    let run = |trace_text: &str, plot: &Path| {
        let trace = dir.path().join("t.csv");
        std::fs::write(&trace, trace_text).unwrap();
        Tollgate::simulate()
            .trace(&trace)
            .strategy("all")
            .limit(1)
            .window("1s")
            .plot(plot)
            .run()
    };
    let svg = dir.path().join("c.svg");
    let out = run("time,key\n", &svg);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the trace has no requests to plot"));
    let out = run("time,key\n1,a\nsoon,b\n", &svg);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3:"));
    assert!(!svg.exists());
    let nowhere = dir.path().join("no/such/dir/c.png");
    let out = run("time,key\n1,a\n", &nowhere);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: cannot write plot"), "{stderr}");
    assert_eq!(file_names(dir.path()), ["t.csv"]);
}

#[test]
fn one_request_and_odd_keys_still_make_a_valid_chart() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "time,key,cost\n5,\"<a&b>\"\"\",3\n").unwrap();
    for name in ["c.svg", "c.png"] {
        let plot = dir.path().join(name);
        Tollgate::simulate()
            .trace(&trace)
            .strategy("all")
            .limit(2)
            .window("1s")
            .plot(&plot)
            .run_ok();
        if name.ends_with("svg") {
            let texts = svg_texts(&plot);
            assert_eq!(
                texts[0],
                "key <a&b>\\\": 1 request (the busiest key), limit 2 per 1s"
            );
        } else {
            assert_eq!(png_size(&plot), (1000, 4 * 260 + 70));
        }
    }
}

#[test]
fn charts_go_through_links_into_fifos_and_never_replace_directories_or_devices() {
    use std::os::unix::fs::{symlink, FileTypeExt};
    let dir = tempfile::tempdir().unwrap();
    // A link to a PNG elsewhere: the target is written, the link kept.
    std::fs::create_dir(dir.path().join("real")).unwrap();
    let link = dir.path().join("chart.png");
    symlink("real/target.png", &link).unwrap();
    let out = sample("token_bucket").plot(&link).run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(png_size(&dir.path().join("real/target.png")), (1000, 330));
    assert_eq!(file_names(&dir.path().join("real")), ["target.png"]);
    // A FIFO receives the chart.
    let fifo = dir.path().join("chart.svg");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let out = sample("token_bucket").plot(&fifo).run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = reader.join().unwrap();
    assert!(roxmltree::Document::parse(&svg).is_ok());
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    // A link to /dev/full: the device's error, and the device stays.
    let full = dir.path().join("full.svg");
    symlink("/dev/full", &full).unwrap();
    let out = sample("token_bucket").plot(&full).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.starts_with(&format!(
            "error: cannot write plot {}: No space left on device",
            arg(&full)
        )),
        "{stderr}"
    );
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
    // A directory is an error before anything is replayed.
    let charts = dir.path().join("charts.svg");
    std::fs::create_dir(&charts).unwrap();
    let out = sample("token_bucket").plot(&charts).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr,
        format!("error: invalid --plot {}: is a directory\n", arg(&charts))
    );
    assert!(charts.is_dir());
    assert_eq!(file_names(&charts), Vec::<String>::new());
}

#[test]
fn a_chart_may_not_replace_a_decisions_file() {
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("out.svg");
    let out = sample("token_bucket").plot(&same).decisions(&same).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("is also a --decisions file"), "{stderr}");
    assert_eq!(file_names(dir.path()), Vec::<String>::new());
}

#[test]
fn a_long_key_is_cut_in_the_chart_title() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    let key = "x".repeat(50_000);
    std::fs::write(&trace, format!("time,key\n5,{key}\n")).unwrap();
    let plot = dir.path().join("c.svg");
    Tollgate::simulate()
        .trace(&trace)
        .strategy("token_bucket")
        .limit(2)
        .window("1s")
        .plot(&plot)
        .run_ok();
    assert_eq!(
        svg_texts(&plot)[0],
        format!(
            "key {}… (50000 bytes): 1 request (the busiest key), limit 2 per 1s",
            "x".repeat(64)
        )
    );
    assert!(std::fs::metadata(&plot).unwrap().len() < 20_000);
}
