//! `kai explain pg` as text: labelled fields wrapped to the terminal's width. Pure.

use super::report::{Amounts, Explanation, PodStates, Verdict, Victim};
use crate::render::{spec_text, wrap};

const LABEL: usize = 15;

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn field(out: &mut String, label: &str, text: &str, width: usize) {
    let first = format!("  {label:<w$}", w = LABEL - 2);
    out.push_str(&wrap(&first, LABEL, text, width));
}

fn list(a: &Amounts) -> String {
    if a.is_empty() {
        return "nothing".to_owned();
    }
    a.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn states(p: &PodStates) -> String {
    let parts: Vec<String> = [
        (p.running, "running"),
        (p.bound, "bound"),
        (p.reserved, "reserved"),
        (p.pending, "pending"),
        (p.gated, "gated"),
        (p.releasing, "being deleted"),
        (p.succeeded, "succeeded"),
        (p.failed, "failed"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, s)| format!("{n} {s}"))
    .collect();
    let total = plural(p.total, "pod", "pods");
    if parts.is_empty() {
        format!("{total} (none exist yet)")
    } else {
        format!("{total}: {}", parts.join(", "))
    }
}

fn victims_text(v: &[Victim]) -> String {
    v.iter()
        .map(|v| {
            let action = v.action.as_ref().map(|a| format!(", by {a}")).unwrap_or_default();
            format!(
                "{} (queue {}, priority {}, {}: {}{action})",
                v.gang,
                v.queue,
                v.priority,
                plural(u32::try_from(v.pods).unwrap_or(u32::MAX), "pod", "pods"),
                list(&v.resources)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The explanation as text wrapped to `width` columns.
#[must_use]
pub fn render(e: &Explanation, width: usize) -> String {
    let mut out = format!("{} {}/{}\n", e.kind, e.namespace, e.name);
    if let Some(root) = &e.part_of {
        field(
            &mut out,
            "Part of:",
            &format!("gang {root} (parentPodGroup); analysed as a whole"),
            width,
        );
    }
    field(&mut out, "Queue:", &e.queue, width);
    let priority = match &e.priority_class {
        Some(pc) => format!("{pc} ({})", e.priority),
        None => e.priority.to_string(),
    };
    let preempt = if e.preemptible {
        "preemptible"
    } else {
        "non-preemptible"
    };
    field(&mut out, "Priority:", &format!("{priority}, {preempt}"), width);
    let max = e
        .max_member
        .map(|m| format!(", maxMember {m}"))
        .unwrap_or_default();
    field(
        &mut out,
        "Gang:",
        &format!("minMember {}{max}; {}", e.min_member, states(&e.pods)),
        width,
    );
    for p in &e.problems {
        field(
            &mut out,
            "Problem:",
            &format!("{}: {}", p.reason, p.message),
            width,
        );
    }
    match &e.written {
        None if e.kind != "PodGroup" => field(
            &mut out,
            "Status:",
            "not shown for Volcano PodGroups (the scheduler's reasons are on the pods' conditions and in events)",
            width,
        ),
        None => field(
            &mut out,
            "Status:",
            "none written yet (is the scheduler running, and does it own this PodGroup?)",
            width,
        ),
        Some(w) => {
            field(
                &mut out,
                "Status:",
                &format!(
                    "{} (as the scheduler wrote it)",
                    w.phase.as_deref().unwrap_or("no phase")
                ),
                width,
            );
            for c in &w.conditions {
                let head = format!(
                    "{}={}{}{}",
                    c.type_,
                    c.status,
                    c.reason.as_ref().map(|r| format!(" {r}")).unwrap_or_default(),
                    c.since
                        .as_ref()
                        .map(|s| format!(" since {s}"))
                        .unwrap_or_default()
                );
                let text = match &c.message {
                    Some(m) => format!("{head}: {m}"),
                    None => head,
                };
                out.push_str(&wrap(&" ".repeat(LABEL), LABEL + 2, &text, width));
            }
            if w.scheduling_reasons.len() > 1 {
                for r in &w.scheduling_reasons {
                    out.push_str(&wrap(
                        &format!("{}- ", " ".repeat(LABEL)),
                        LABEL + 2,
                        &format!("{}: {}", r.reason, r.message),
                        width,
                    ));
                }
            }
        }
    }
    let a = &e.analysis;
    out.push_str(&format!(
        "\nAnalysis of a snapshot at {} (one scheduling cycle simulated, nothing written):\n",
        a.snapshot_time
    ));
    let verdict = match (a.verdict, &a.placed_by) {
        (Verdict::Placed, _) if a.reasons.is_empty() => "placed: its minimum is running or bound".to_owned(),
        (Verdict::Placed, _) => "placed; its extra pods (above minMember) wait".to_owned(),
        (Verdict::WouldBePlaced, Some(by)) if by != "allocate" => {
            format!("the scheduler would make room for it now ({by}) and bind it once the room is free")
        }
        (Verdict::WouldBePlaced, _) => {
            "the scheduler would place it in its next cycle (if it stays pending, check the scheduler is running)"
                .to_owned()
        }
        (Verdict::Waiting, _) => "waits".to_owned(),
    };
    field(&mut out, "Verdict:", &verdict, width);
    for r in &a.reasons {
        field(&mut out, "Why:", &format!("{} ({})", r.message, r.reason), width);
    }
    if let Some(r) = &a.request {
        field(
            &mut out,
            "Request:",
            &format!(
                "{} to place need {}; largest pod {}: {}",
                plural(r.pods, "pod", "pods"),
                list(&r.total),
                r.largest_pod,
                list(&r.largest_pod_request)
            ),
            width,
        );
    }
    if let Some(n) = &a.nodes {
        let mut text = format!(
            "{} of {} {}'s placement rules (readiness, cordon, selector, affinity, taints); free there: {}",
            n.eligible,
            plural(
                u32::try_from(n.nodes).unwrap_or(u32::MAX),
                "node passes",
                "nodes pass"
            ),
            n.pod,
            list(&n.free_on_eligible)
        );
        text.push_str(&format!(
            ". It fits {} now",
            plural(u32::try_from(n.fits_now).unwrap_or(u32::MAX), "node", "nodes")
        ));
        if n.fits_after_releases > 0 {
            text.push_str(&format!(
                ", {} more once pods being deleted are gone",
                n.fits_after_releases
            ));
        }
        if !n.refused.is_empty() {
            let refused: Vec<String> = n
                .refused
                .iter()
                .map(|c| format!("{} {}", c.nodes, c.reason))
                .collect();
            text.push_str(&format!("; refused by {}", refused.join(", ")));
        }
        field(&mut out, "Nodes:", &text, width);
    }
    for (i, q) in a.queues.iter().enumerate() {
        // Only what a rule applies to: resources with a quota or a limit.
        let parts: Vec<String> = q
            .resources
            .iter()
            .filter(|r| r.quota >= 0.0 || r.limit >= 0.0)
            .map(|r| {
                format!(
                    "{} allocated {}, requested {}, fair share {}, quota {}, limit {}",
                    r.resource,
                    spec_text(&r.resource, r.allocated),
                    spec_text(&r.resource, r.requested),
                    spec_text(&r.resource, r.fair_share),
                    spec_text(&r.resource, r.quota),
                    spec_text(&r.resource, r.limit)
                )
            })
            .collect();
        let text = if parts.is_empty() {
            format!("{}: no quota or limit on what the gang asks for", q.name)
        } else {
            format!("{}: {}", q.name, parts.join("; "))
        };
        field(&mut out, if i == 0 { "Queue:" } else { "" }, &text, width);
    }
    match &a.queue_gate {
        // Already said as the reason it waits.
        Some(g) if a.reasons.contains(g) => {}
        Some(g) => field(
            &mut out,
            "Queue rule:",
            &format!("{} ({})", g.message, g.reason),
            width,
        ),
        None if !a.queues.is_empty() && a.request.is_some() => {
            field(
                &mut out,
                "Queue rule:",
                "its request is within every queue limit on the path",
                width,
            );
        }
        None => {}
    }
    if !a.evictions.is_empty() {
        field(&mut out, "Evicts:", &victims_text(&a.evictions), width);
    }
    if let Some(f) = &a.to_fit {
        field(&mut out, "To fit:", &f.summary, width);
        if let Some(q) = &f.queue {
            let text = if f.preemptible_lower_priority.is_empty() {
                format!("none of lower priority runs in queue {q}")
            } else {
                format!("in queue {q}: {}", victims_text(&f.preemptible_lower_priority))
            };
            field(&mut out, "Preemptible:", &text, width);
        }
        match &f.smallest_eviction {
            None => {}
            Some(v) if v.is_empty() => field(
                &mut out,
                "Evicting:",
                "no set of running gangs of this scheduler would make room (the room is held by other pods \
                 or does not exist)",
                width,
            ),
            Some(v) => field(
                &mut out,
                "Evicting:",
                &format!(
                    "{} would make room (fewest gangs, any queue or priority; the scheduler's own rules may \
                     not allow it)",
                    victims_text(v)
                ),
                width,
            ),
        }
    }
    out
}
