/**
 * A small parser of the Prometheus text exposition format for tests: it reads every sample
 * back (names, labels with their escapes, values), and checks what a scraper relies on: each
 * family's `# TYPE` comes before its samples, a counter's samples end in `_total`, a
 * histogram's buckets are cumulative and end with `+Inf` equal to `_count`.
 */

/** One sample read back. */
export interface ParsedSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** What a scrape said. */
export interface Scrape {
  readonly types: ReadonlyMap<string, string>;
  readonly samples: readonly ParsedSample[];
  /** The value of the one sample named `name` whose labels include `labels`. */
  value(name: string, labels?: Record<string, string>): number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/;

/** Parse `text`; throws on anything a scraper would refuse. */
export function parseExposition(text: string): Scrape {
  const types = new Map<string, string>();
  const samples: ParsedSample[] = [];
  if (text !== "" && !text.endsWith("\n")) {
    throw new Error("the exposition must end with a newline");
  }
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("# HELP ")) continue;
    if (line.startsWith("# TYPE ")) {
      const [, , name, type] = line.split(" ");
      if (types.has(name)) throw new Error(`${name} declared twice`);
      if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(type)) {
        throw new Error(`unknown type ${type}`);
      }
      types.set(name, type);
      continue;
    }
    if (line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const [, name, , labelText, valueText] = match;
    const value = valueText === "+Inf"
      ? Infinity
      : valueText === "-Inf"
      ? -Infinity
      : valueText === "NaN"
      ? NaN
      : Number(valueText);
    if (Number.isNaN(value) && valueText !== "NaN") throw new Error(`bad value in ${line}`);
    const family = familyOf(name, types);
    if (!family) throw new Error(`${name} has no # TYPE before it`);
    samples.push({ name, labels: parseLabels(labelText ?? ""), value });
  }
  checkHistograms(types, samples);
  return {
    types,
    samples,
    value(name, labels = {}) {
      const found = samples.filter((s) =>
        s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
      );
      if (found.length !== 1) {
        throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
      }
      return found[0].value;
    },
  };
}

function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : undefined;
    if (base && types.get(base) === "histogram") return base;
  }
  return undefined;
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf("=", i);
    const name = text.slice(i, eq);
    if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(name)) throw new Error(`bad label name ${name}`);
    if (text[eq + 1] !== '"') throw new Error(`label ${name} is not quoted`);
    let value = "";
    let j = eq + 2;
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === "\\") {
        const next = text[++j];
        value += next === "n" ? "\n" : next;
      } else if (text[j] === "\n") throw new Error("a raw newline in a label value");
      else value += text[j];
    }
    if (text[j] !== '"') throw new Error(`label ${name} is not closed`);
    if (name in labels) throw new Error(`label ${name} repeated`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ",") i += 1;
  }
  return labels;
}

function checkHistograms(types: Map<string, string>, samples: ParsedSample[]): void {
  for (const [name, type] of types) {
    if (type === "counter" && !name.endsWith("_total")) throw new Error(`counter ${name}`);
    if (type !== "histogram") continue;
    const series = new Map<string, ParsedSample[]>();
    for (const sample of samples) {
      if (sample.name !== `${name}_bucket`) continue;
      const { le: _, ...rest } = sample.labels;
      const key = JSON.stringify(rest);
      series.set(key, [...(series.get(key) ?? []), sample]);
    }
    for (const [key, buckets] of series) {
      let previous = 0;
      let bound = -Infinity;
      for (const bucket of buckets) {
        const le = bucket.labels.le === "+Inf" ? Infinity : Number(bucket.labels.le);
        if (!(le > bound)) throw new Error(`${name} buckets out of order`);
        if (bucket.value < previous) throw new Error(`${name} buckets are not cumulative`);
        bound = le;
        previous = bucket.value;
      }
      if (bound !== Infinity) throw new Error(`${name} has no +Inf bucket`);
      const count = samples.find((s) =>
        s.name === `${name}_count` && JSON.stringify(s.labels) === key
      );
      if (count?.value !== previous) throw new Error(`${name}_count differs from +Inf`);
    }
  }
}
