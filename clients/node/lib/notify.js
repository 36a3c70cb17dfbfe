// Reading the token out of a `work_lease_lost` notification exactly.

/**
 * The superseded token named by a `work_lease_lost` payload (docs/contract.md, NOTIFY
 * `work_lease_lost`: JSON `{"id", "queue", "key", "owner", "epoch"}`), with `id` and `epoch` as
 * decimal strings taken from the JSON text itself, so that values above 2^53 (which `JSON.parse`
 * would round) are matched exactly against the strings node-postgres returns for bigints.
 *
 * @param {string} payload the notification's payload
 * @returns {{id: string, epoch: string} | null} null when the payload is not a JSON object with
 *   integer `id` and `epoch` members
 */
export function leaseLostToken(payload) {
  const members = topLevelNumbers(payload);
  if (!members) return null;
  const { id, epoch } = members;
  if (id === undefined || epoch === undefined) return null;
  if (!/^-?\d+$/.test(id) || !/^-?\d+$/.test(epoch)) return null;
  return { id: canonical(id), epoch: canonical(epoch) };
}

/** An integer's text without leading zeros (JSON has none, but be exact about "-0"). */
function canonical(digits) {
  return BigInt(digits).toString();
}

/**
 * The members of a JSON object whose values are numbers, as their source text; null when the
 * text is not valid JSON or not an object. Nested values are validated by JSON.parse and skipped.
 */
function topLevelNumbers(text) {
  try {
    const parsed = JSON.parse(text);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return null;
  } catch {
    return null;
  }
  // The text is valid JSON: walk its top level, skipping strings and nested values.
  const out = {};
  let i = text.indexOf('{') + 1;
  const space = () => { while (/\s/.test(text[i] ?? '')) i += 1; };
  const string = () => { // at the opening quote; returns the decoded string
    const start = i;
    for (i += 1; text[i] !== '"'; i += 1) if (text[i] === '\\') i += 1;
    i += 1;
    return JSON.parse(text.slice(start, i));
  };
  const skipValue = () => {
    if (text[i] === '"') { string(); return null; }
    if (text[i] === '{' || text[i] === '[') {
      let depth = 0;
      do {
        if (text[i] === '"') { string(); continue; }
        if (text[i] === '{' || text[i] === '[') depth += 1;
        if (text[i] === '}' || text[i] === ']') depth -= 1;
        i += 1;
      } while (depth > 0);
      return null;
    }
    const start = i;
    while (i < text.length && !/[\s,}]/.test(text[i])) i += 1;
    const raw = text.slice(start, i);
    return /^-?\d/.test(raw) ? raw : null;
  };
  for (space(); text[i] !== '}'; space()) {
    if (text[i] === ',') { i += 1; space(); }
    const key = string();
    space();
    i += 1; // ':'
    space();
    const number = skipValue();
    if (number !== null) out[key] = number;
  }
  return out;
}
