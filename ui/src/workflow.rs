//! The workflow graph on an item's page: inline SVG rendered here, on the server, from the rows
//! of `work_workflow(id)` (from 0.12.0, db.rs), with no script.
//!
//! Each item is a box linked to its page, in a column by its step from the item asked about:
//! its parents one column to the left, theirs two, its children one to the right, and so on
//! (`work_workflow`'s `depth`, moved one column further only where an edge would otherwise stay
//! within a column or point back: an item both a child and a grandchild of another is drawn after
//! both). An arrow goes from each parent to its child. A box says its state in a word (and is
//! coloured and dashed by it, a key beside), its queue and its key, shortened (the tooltip has
//! them whole); the item of the page is framed and says *this item*. At most
//! [`WORKFLOW_MAX_DRAWN`] boxes, the nearest first; a box whose parents or children are not
//! drawn says how many (`+N`).
//!
//! As for the charts (charts.rs), colours and strokes are SVG presentation attributes, which
//! the Content Security Policy does not govern, and every text is escaped by maud.

use std::collections::{BTreeMap, HashMap, HashSet};

use maud::{html, Markup};

use crate::db::{WorkflowRow, ITEM_STATES, WORKFLOW_MAX_DRAWN};
use crate::pages::{item_href, shorten};

/// A box's width, in SVG user units (pixels at the page's scale).
const NODE_W: f64 = 184.0;
/// A box's height.
const NODE_H: f64 = 54.0;
/// The room between two columns, for the arrows.
const GAP_X: f64 = 72.0;
/// The room between two boxes of a column.
const GAP_Y: f64 = 14.0;
/// The room left and right of the graph (a `+N` of parents or children not drawn).
const MARGIN_X: f64 = 40.0;
/// The room above and below the graph (the frame of the page's item).
const MARGIN_Y: f64 = 10.0;
/// Where a `+N` (parents or children not drawn) meets a box, below the arrows, which meet it
/// in its middle.
const STUB_Y: f64 = NODE_H - 10.0;
/// The characters of a queue's name a box shows.
const QUEUE_CHARS: usize = 26;
/// The characters of a key a box shows (its start and its end).
const KEY_CHARS: usize = 28;
/// The most ids a tooltip of items not drawn names.
const TIP_IDS: usize = 10;

/// Colours of what is not a state.
const EDGE: &str = "#8c959f";
const EDGE_NEAR: &str = "#424a53";
const TEXT: &str = "#24292f";
const MUTED: &str = "#57606a";

/// How a state is drawn: its stroke (and its word's colour), its fill, its dash pattern.
pub fn look(state: &str) -> (&'static str, &'static str, Option<&'static str>) {
    match state {
        "waiting" => ("#8250df", "#fbefff", Some("5 3")),
        "pending" => ("#0969da", "#ddf4ff", None),
        "claimed" => ("#9a6700", "#fff8c5", None),
        "done" => ("#1a7f37", "#dafbe1", None),
        "failed" => ("#cf222e", "#ffebe9", None),
        "cancelled" => ("#57606a", "#eaeef2", Some("1.5 2.5")),
        _ => (MUTED, "#ffffff", None),
    }
}

/// `text` cut to `max` characters in its middle (`0190a1b2-…-4c2f9e1d`): keys generated
/// as UUIDv7 differ at both ends, their time first and their random part last.
fn middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let mut cut: String = text.chars().take(head).collect();
    cut.push('…');
    cut.extend(text.chars().skip(n - tail));
    cut
}

/// A coordinate with one decimal.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// Up to [`TIP_IDS`] ids, and how many more.
fn some_ids(ids: &[i64]) -> String {
    let mut text = ids
        .iter()
        .take(TIP_IDS)
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > TIP_IDS {
        text.push_str(&format!(" and {} more", ids.len() - TIP_IDS));
    }
    text
}

/// One box of the graph.
#[derive(Debug)]
struct Node<'a> {
    row: &'a WorkflowRow,
    /// Its column: 0 the page's item, below 0 its ancestors, above 0 its descendants.
    layer: i32,
    /// Its place in its column, from the top.
    x: f64,
    y: f64,
    /// Its parents that are not drawn (not returned by `work_workflow`: not ancestors of the
    /// page's item, or in queues the role may not read; or left out by the cap).
    hidden_parents: Vec<i64>,
    /// Its children among the rows that were left out by the cap.
    hidden_children: Vec<i64>,
}

/// The graph as placed: boxes, arrows (parent, child: indices of `nodes`), its size.
#[derive(Debug)]
struct Layout<'a> {
    nodes: Vec<Node<'a>>,
    edges: Vec<(usize, usize)>,
    width: f64,
    height: f64,
}

/// Places at most `max` of `rows` (the nearest to the item `current`, then by id): the
/// columns by depth, corrected so that every arrow points right; in each column, the boxes
/// ordered by where their parents and children are (a few barycentre sweeps), to spare
/// crossings.
fn layout(current: i64, rows: &[WorkflowRow], max: usize) -> Layout<'_> {
    let mut order: Vec<&WorkflowRow> = Vec::with_capacity(rows.len());
    let mut seen = HashSet::new();
    let mut sorted: Vec<&WorkflowRow> = rows.iter().collect();
    sorted.sort_by_key(|r| (r.id != current, r.depth.unsigned_abs(), r.id));
    for r in sorted {
        if seen.insert(r.id) {
            order.push(r);
        }
    }
    let (drawn, left_out) = order.split_at(order.len().min(max));
    let index: HashMap<i64, usize> = drawn.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    let mut nodes: Vec<Node<'_>> = drawn
        .iter()
        .map(|r| Node {
            row: r,
            layer: r.depth,
            x: 0.0,
            y: 0.0,
            hidden_parents: Vec::new(),
            hidden_children: Vec::new(),
        })
        .collect();
    let mut edges = Vec::new();
    let mut edge_seen = HashSet::new();
    for (c, r) in drawn.iter().enumerate() {
        for &p in &r.parents {
            match index.get(&p) {
                Some(&p) if p != c => {
                    if edge_seen.insert((p, c)) {
                        edges.push((p, c));
                    }
                }
                Some(_) => {}
                None => {
                    if !nodes[c].hidden_parents.contains(&p) {
                        nodes[c].hidden_parents.push(p);
                    }
                }
            }
        }
    }
    for r in left_out {
        let mut parents: Vec<i64> = r.parents.clone();
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            if let Some(&p) = index.get(&p) {
                nodes[p].hidden_children.push(r.id);
            }
        }
    }
    // Every arrow to the right: a descendant goes right of its parents, an ancestor left of
    // its children. The edges were made only when a child was inserted, so they form no
    // cycle, and this ends within as many passes as there are boxes (bounded all the same).
    for _ in 0..=nodes.len() {
        let mut changed = false;
        for &(p, c) in &edges {
            if nodes[c].layer > nodes[p].layer {
                continue;
            }
            if nodes[c].row.depth > 0 {
                nodes[c].layer = nodes[p].layer + 1;
                changed = true;
            } else if nodes[p].row.depth < 0 {
                nodes[p].layer = nodes[c].layer - 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // The columns, each in id order to begin with (the order of `drawn` is by distance, id).
    let mut columns: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        columns.entry(n.layer).or_default().push(i);
    }
    for column in columns.values_mut() {
        column.sort_by_key(|&i| nodes[i].row.id);
    }
    let mut parents_of = vec![Vec::new(); nodes.len()];
    let mut children_of = vec![Vec::new(); nodes.len()];
    for &(p, c) in &edges {
        parents_of[c].push(p);
        children_of[p].push(c);
    }
    // Each box's place in its column, 0 (top) to 1 (bottom), the columns centred.
    let mut at = vec![0.0_f64; nodes.len()];
    let place = |column: &[usize], at: &mut Vec<f64>| {
        for (k, &i) in column.iter().enumerate() {
            at[i] = (k as f64 + 0.5) / column.len() as f64;
        }
    };
    for column in columns.values() {
        place(column, &mut at);
    }
    let layers: Vec<i32> = columns.keys().copied().collect();
    let mut sweep = |by: &[Vec<usize>], layers: &[i32], at: &mut Vec<f64>| {
        for layer in layers {
            let column = columns.get_mut(layer).expect("a column of each layer");
            let key = |i: usize| -> f64 {
                let near = &by[i];
                if near.is_empty() {
                    at[i]
                } else {
                    near.iter().map(|&j| at[j]).sum::<f64>() / near.len() as f64
                }
            };
            let mut keyed: Vec<(f64, usize)> = column.iter().map(|&i| (key(i), i)).collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            *column = keyed.into_iter().map(|(_, i)| i).collect();
            place(column, at);
        }
    };
    let reversed: Vec<i32> = layers.iter().rev().copied().collect();
    for _ in 0..3 {
        sweep(&parents_of, &layers, &mut at);
        sweep(&children_of, &reversed, &mut at);
    }
    sweep(&parents_of, &layers, &mut at);

    let first = layers.first().copied().unwrap_or(0);
    let tallest = columns.values().map(Vec::len).max().unwrap_or(1);
    let step_y = NODE_H + GAP_Y;
    for (layer, column) in &columns {
        let x = MARGIN_X + f64::from(layer - first) * (NODE_W + GAP_X);
        let top = MARGIN_Y + (tallest - column.len()) as f64 * step_y / 2.0;
        for (k, &i) in column.iter().enumerate() {
            nodes[i].x = x;
            nodes[i].y = top + k as f64 * step_y;
        }
    }
    let count = layers.len().max(1) as f64;
    Layout {
        width: 2.0 * MARGIN_X + count * NODE_W + (count - 1.0) * GAP_X,
        height: 2.0 * MARGIN_Y + tallest as f64 * step_y - GAP_Y,
        nodes,
        edges,
    }
}

/// The graph of the workflow around item `current` (`rows`: `work_workflow(current)`, at
/// least one other item than it) as a `<figure>`: a key of the states, and the SVG, in a box
/// that scrolls when the graph is bigger than the page.
pub fn graph(current: i64, rows: &[WorkflowRow]) -> Markup {
    let layout = layout(current, rows, WORKFLOW_MAX_DRAWN);
    let nodes = &layout.nodes;
    let by_state: Vec<(&str, usize)> = ITEM_STATES
        .iter()
        .map(|s| (*s, nodes.iter().filter(|n| n.row.state == *s).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let me = nodes.iter().find(|n| n.row.id == current);
    let near = |depth: i32| nodes.iter().filter(|n| n.row.depth == depth).count();
    let desc = format!(
        "{} items drawn: this item{}, {} of its parents, {} of its children and {} further \
         away; {}.",
        nodes.len(),
        me.map(|n| format!(" ({})", n.row.state))
            .unwrap_or_default(),
        near(-1),
        near(1),
        nodes
            .iter()
            .filter(|n| n.row.depth.unsigned_abs() > 1)
            .count(),
        by_state
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let (width, height) = (layout.width, layout.height);
    let mid = NODE_H / 2.0;
    html! {
        figure #workflow-graph {
            figcaption {
                @for state in ITEM_STATES {
                    @let (stroke, fill, dash) = look(state);
                    span.key data-state=(state) {
                        svg width="18" height="12" aria-hidden="true" {
                            rect x="1" y="1" width="16" height="10" rx="2" fill=(fill) stroke=(stroke)
                                stroke-width="1.5" stroke-dasharray=[dash] {}
                        }
                        " " (state)
                    }
                    " "
                }
            }
            div.workflow-scroll tabindex="0" {
                svg viewBox=(format!("0 0 {} {}", f1(width), f1(height))) width=(f1(width)) height=(f1(height))
                    role="group" aria-labelledby="workflow-title workflow-desc"
                    font-family="system-ui, sans-serif" font-size="11" {
                    title #workflow-title { "The workflow around item " (current) }
                    desc #workflow-desc { (desc) }
                    defs {
                        marker #workflow-arrow viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
                            markerHeight="7" orient="auto-start-reverse" {
                            path d="M0,0 L10,5 L0,10 z" fill=(EDGE_NEAR) {}
                        }
                    }
                    // The arrows first: the boxes are drawn over them.
                    g.edges fill="none" {
                        @for &(p, c) in &layout.edges {
                            @let (p, c) = (&nodes[p], &nodes[c]);
                            @let (x1, y1) = (p.x + NODE_W, p.y + mid);
                            @let (x2, y2) = (c.x - 2.0, c.y + mid);
                            @let bend = GAP_X / 2.0;
                            @let close = p.row.id == current || c.row.id == current;
                            path.edge data-parent=(p.row.id) data-child=(c.row.id)
                                d=(format!("M{} {} C{} {} {} {} {} {}", f1(x1), f1(y1), f1(x1 + bend), f1(y1),
                                    f1(x2 - bend), f1(y2), f1(x2), f1(y2)))
                                stroke=(if close { EDGE_NEAR } else { EDGE })
                                stroke-width=(if close { "1.75" } else { "1.25" })
                                marker-end="url(#workflow-arrow)" {}
                        }
                    }
                    @for n in nodes {
                        @let r = n.row;
                        @let (stroke, fill, dash) = look(&r.state);
                        @let here = r.id == current;
                        @if !n.hidden_parents.is_empty() {
                            @let k = n.hidden_parents.len();
                            @let tip = format!(
                                "{k} more {} of item {}, not drawn: {} (not ancestors of this item, \
                                 left out, or in queues this role may not read)",
                                if k == 1 { "parent" } else { "parents" }, r.id, some_ids(&n.hidden_parents));
                            @let stub = html! {
                                title { (tip) }
                                line x1=(f1(n.x - 30.0)) y1=(f1(n.y + STUB_Y)) x2=(f1(n.x - 2.0)) y2=(f1(n.y + STUB_Y))
                                    stroke=(EDGE) stroke-dasharray="3 2" marker-end="url(#workflow-arrow)" {}
                                text x=(f1(n.x - 4.0)) y=(f1(n.y + STUB_Y + 12.0)) text-anchor="end" fill=(MUTED) {
                                    "+" (k)
                                }
                            };
                            @if let &[only] = n.hidden_parents.as_slice() {
                                a.hidden-parents href=(item_href(only)) data-child=(r.id) data-count=(k) { (stub) }
                            } @else {
                                g.hidden-parents data-child=(r.id) data-count=(k) { (stub) }
                            }
                        }
                        @if !n.hidden_children.is_empty() {
                            @let k = n.hidden_children.len();
                            g.hidden-children data-parent=(r.id) data-count=(k) {
                                title {
                                    (k) " more " @if k == 1 { "child" } @else { "children" }
                                    " of item " (r.id) ", not drawn: " (some_ids(&n.hidden_children))
                                    " (the graph shows the " (WORKFLOW_MAX_DRAWN) " items nearest to this one)"
                                }
                                line x1=(f1(n.x + NODE_W)) y1=(f1(n.y + STUB_Y)) x2=(f1(n.x + NODE_W + 28.0)) y2=(f1(n.y + STUB_Y))
                                    stroke=(EDGE) stroke-dasharray="3 2" marker-end="url(#workflow-arrow)" {}
                                text x=(f1(n.x + NODE_W + 4.0)) y=(f1(n.y + STUB_Y + 12.0)) fill=(MUTED) { "+" (k) }
                            }
                        }
                        a.node href=(item_href(r.id)) data-id=(r.id) data-state=(r.state) data-depth=(r.depth)
                            data-current=[here.then_some("true")] aria-current=[here.then_some("page")] {
                            title {
                                "item " (r.id) @if here { " (this item)" } ": " (r.state) ", queue " (r.queue) ", key " (r.key)
                                @if !r.parents.is_empty() { "; parents: " (some_ids(&r.parents)) }
                            }
                            @if here {
                                rect.here x=(f1(n.x - 4.0)) y=(f1(n.y - 4.0)) width=(f1(NODE_W + 8.0)) height=(f1(NODE_H + 8.0))
                                    rx="7" fill="none" stroke=(TEXT) stroke-width="2" {}
                            }
                            rect.box x=(f1(n.x)) y=(f1(n.y)) width=(f1(NODE_W)) height=(f1(NODE_H)) rx="4"
                                fill=(fill) stroke=(stroke) stroke-width=(if here { "2.5" } else { "1.5" })
                                stroke-dasharray=[dash] {}
                            text.state x=(f1(n.x + 8.0)) y=(f1(n.y + 16.0)) font-weight="600" fill=(stroke) { (r.state) }
                            @if here {
                                text.here x=(f1(n.x + NODE_W - 8.0)) y=(f1(n.y + 16.0)) text-anchor="end" font-weight="600" fill=(TEXT) { "this item" }
                            } @else {
                                text.id x=(f1(n.x + NODE_W - 8.0)) y=(f1(n.y + 16.0)) text-anchor="end" fill=(MUTED) { "#" (r.id) }
                            }
                            text.queue x=(f1(n.x + 8.0)) y=(f1(n.y + 32.0)) fill=(TEXT) { (shorten(&r.queue, QUEUE_CHARS)) }
                            text.key x=(f1(n.x + 8.0)) y=(f1(n.y + 46.0)) fill=(MUTED) { (middle(&r.key, KEY_CHARS)) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, state: &str, depth: i32, parents: &[i64]) -> WorkflowRow {
        WorkflowRow {
            id,
            queue: "q".into(),
            key: format!("k{id}"),
            state: state.into(),
            depth,
            parents: parents.to_vec(),
        }
    }

    fn node<'a>(l: &'a Layout<'_>, id: i64) -> &'a Node<'a> {
        l.nodes
            .iter()
            .find(|n| n.row.id == id)
            .unwrap_or_else(|| panic!("node {id}"))
    }

    #[test]
    fn a_fan_in_is_two_columns() {
        let rows = [
            row(3, "waiting", 0, &[1, 2]),
            row(1, "done", -1, &[]),
            row(2, "pending", -1, &[]),
        ];
        let l = layout(3, &rows, 200);
        assert_eq!(l.nodes.len(), 3);
        assert_eq!(l.edges.len(), 2);
        assert_eq!(node(&l, 1).layer, -1);
        assert_eq!(node(&l, 3).layer, 0);
        assert_eq!(node(&l, 1).x, node(&l, 2).x);
        assert!(node(&l, 3).x > node(&l, 1).x);
        // The child between its parents.
        assert!(node(&l, 1).y < node(&l, 3).y && node(&l, 3).y < node(&l, 2).y);
        assert!(node(&l, 3).hidden_parents.is_empty());
    }

    #[test]
    fn every_arrow_points_right() {
        // 1 -> 2 -> 3 and 1 -> 3: from 1, both 2 and 3 are at depth 1.
        let rows = [
            row(1, "done", 0, &[]),
            row(2, "done", 1, &[1]),
            row(3, "waiting", 1, &[1, 2]),
        ];
        let l = layout(1, &rows, 200);
        assert_eq!(node(&l, 2).layer, 1);
        assert_eq!(node(&l, 3).layer, 2);
        // The same seen from 3: 1 and 2 are its parents.
        let rows = [
            row(3, "waiting", 0, &[1, 2]),
            row(1, "done", -1, &[]),
            row(2, "done", -1, &[1]),
        ];
        let l = layout(3, &rows, 200);
        assert_eq!(node(&l, 2).layer, -1);
        assert_eq!(node(&l, 1).layer, -2);
        for &(p, c) in &l.edges {
            assert!(l.nodes[p].x < l.nodes[c].x, "{p} -> {c}");
        }
    }

    #[test]
    fn what_is_not_drawn_is_counted() {
        // From a parent of a fan-in: the child's other parent is not returned.
        let rows = [row(1, "done", 0, &[]), row(3, "waiting", 1, &[1, 2])];
        let l = layout(1, &rows, 200);
        assert_eq!(node(&l, 3).hidden_parents, vec![2]);
        // A fan-out wider than the cap: the nearest drawn, the rest counted on the parent.
        let mut rows = vec![row(1, "done", 0, &[])];
        rows.extend((2..=12).map(|id| row(id, "pending", 1, &[1])));
        let l = layout(1, &rows, 5);
        assert_eq!(l.nodes.len(), 5);
        assert_eq!(node(&l, 1).hidden_children, (6..=12).collect::<Vec<_>>());
        assert!(l.nodes.iter().any(|n| n.row.id == 5));
        let html = graph(1, &rows).into_string();
        assert!(!html.contains("hidden-children"), "200 drawn: {html}");
    }

    #[test]
    fn the_graph_is_escaped_and_links_each_item() {
        let mut rows = vec![
            row(7, "waiting", 0, &[5, 6, 99]),
            row(5, "done", -1, &[]),
            row(6, "failed", -1, &[]),
        ];
        rows[1].queue = "<script>alert(1)</script>".into();
        rows[2].key = "</text><a href=\"javascript:x\">".into();
        let html = graph(7, &rows).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("javascript:x\">"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)"), "{html}");
        for id in [5, 6, 7] {
            assert!(
                html.contains(&format!("href=\"/items/{id}\"")),
                "{id}: {html}"
            );
        }
        assert_eq!(html.matches("<a class=\"node\"").count(), 3, "{html}");
        assert_eq!(html.matches("aria-current=\"page\"").count(), 1, "{html}");
        assert!(
            html.contains(
                "data-id=\"7\" data-state=\"waiting\" data-depth=\"0\" data-current=\"true\""
            ),
            "{html}"
        );
        assert_eq!(html.matches("<path class=\"edge\"").count(), 2, "{html}");
        // The parent 99 not returned: one link to it, counted.
        assert!(
            html.contains(
                "<a class=\"hidden-parents\" href=\"/items/99\" data-child=\"7\" data-count=\"1\">"
            ),
            "{html}"
        );
        assert!(
            html.contains("; 1 waiting, 1 done, 1 failed.</desc>"),
            "{html}"
        );
    }

    #[test]
    fn keys_are_cut_in_the_middle() {
        assert_eq!(middle("short", 28), "short");
        let key = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        let cut = middle(key, 28);
        assert_eq!(cut.chars().count(), 28);
        assert!(
            cut.starts_with("0190a1b2-c3d") && cut.ends_with("0c1d2e3f4a5b"),
            "{cut}"
        );
    }
}
