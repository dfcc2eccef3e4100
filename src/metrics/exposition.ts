/**
 * The Prometheus text exposition format (version 0.0.4), written: metric families with their
 * `# HELP` and `# TYPE` lines, samples with labels, and histograms as their `_bucket`, `_sum`
 * and `_count` series.
 *
 * Label values are escaped as the format requires (backslash, double quote, newline), so a flow
 * or worker name chosen by a user can never break a line or inject a sample. Numbers are
 * written as JavaScript prints them, with `+Inf`, `-Inf` and `NaN` spelled the Prometheus way.
 *
 * @module
 */

import type { HistogramSnapshot } from "./histogram.ts";

/** Label names and values of one sample. */
export type Labels = Readonly<Record<string, string>>;

/** One sample of a counter or a gauge. */
export interface Sample {
  /** Its labels. */
  readonly labels: Labels;
  /** Its value. */
  readonly value: number;
}

/** One histogram series. */
export interface HistogramSample {
  /** Its labels (without `le`). */
  readonly labels: Labels;
  /** The histogram. */
  readonly histogram: HistogramSnapshot;
}

/** A metric family: one name, one help text, one type, any number of samples. */
export type MetricFamily =
  | {
    readonly name: string;
    readonly help: string;
    readonly type: "counter" | "gauge";
    readonly samples: readonly Sample[];
  }
  | {
    readonly name: string;
    readonly help: string;
    readonly type: "histogram";
    readonly samples: readonly HistogramSample[];
  };

/** The content type of the text format. */
export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * Write metric families in the text format. A family without samples is left out.
 *
 * @example
 * ```ts
 * import { renderExposition } from "./exposition.ts";
 * const text = renderExposition([{
 *   name: "jobs_total",
 *   help: "Jobs.",
 *   type: "counter",
 *   samples: [{ labels: { flow: 'say "hi"' }, value: 3 }],
 * }]);
 * console.assert(text.includes('jobs_total{flow="say \\"hi\\""} 3'));
 * ```
 */
export function renderExposition(families: readonly MetricFamily[]): string {
  const lines: string[] = [];
  for (const family of families) {
    if (family.samples.length === 0) continue;
    if (!METRIC_NAME.test(family.name)) {
      throw new TypeError(`Cannot render metrics: invalid metric name ${family.name}`);
    }
    lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`);
    lines.push(`# TYPE ${family.name} ${family.type}`);
    if (family.type === "histogram") {
      for (const { labels, histogram } of family.samples) {
        const { bounds, cumulative, count, sum } = histogram;
        for (let i = 0; i < bounds.length; i++) {
          const le = { ...labels, le: formatNumber(bounds[i]) };
          lines.push(`${family.name}_bucket${formatLabels(le)} ${cumulative[i]}`);
        }
        lines.push(`${family.name}_bucket${formatLabels({ ...labels, le: "+Inf" })} ${count}`);
        lines.push(`${family.name}_sum${formatLabels(labels)} ${formatNumber(sum)}`);
        lines.push(`${family.name}_count${formatLabels(labels)} ${count}`);
      }
    } else {
      for (const { labels, value } of family.samples) {
        lines.push(`${family.name}${formatLabels(labels)} ${formatNumber(value)}`);
      }
    }
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

function formatLabels(labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return "";
  return `{${
    entries.map(([name, value]) => {
      if (!LABEL_NAME.test(name)) {
        throw new TypeError(`Cannot render metrics: invalid label name ${name}`);
      }
      return `${name}="${escapeLabel(value)}"`;
    }).join(",")
  }}`;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(help: string): string {
  return help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}
