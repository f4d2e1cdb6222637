//! Tables of text, as `tollgate check` and `tollgate simulate` print them.

/// `rows` as lines of columns two spaces apart, each as wide as its widest
/// cell; the columns `right` says aligned right, the others left; trailing
/// spaces dropped.
pub fn aligned(rows: &[Vec<String>], right: impl Fn(usize) -> bool) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = width - cell.chars().count();
            if right(i) {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
