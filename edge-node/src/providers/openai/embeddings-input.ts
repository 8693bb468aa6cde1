/**
 * The `input` of an embeddings request, checked by hand: a string, or an array of strings, of
 * token ids, or of arrays of token ids, the kind set by its first element. A zod union over these
 * tried each option on the whole array and built one issue per element that did not fit it (a
 * million token ids, valid or not, held the event loop for seconds); this walks the one kind the
 * array claims and stops at its first bad element. Bounded as OpenAI bounds it.
 */

/** The most inputs one request may hold (OpenAI's bound on an `input` array). */
export const MAX_EMBEDDING_INPUTS = 2048;
/** The most token ids one request may hold across its inputs (OpenAI's bound on the tokens summed across a request). */
export const MAX_EMBEDDING_TOKEN_IDS = 300_000;

export interface InputProblem {
  /** The offending field, as OpenAI's `param` names it: `input`, `input[3]`, `input[3][7]`. */
  param: string;
  reason: string;
}

const EMPTY_STRING = 'must not be an empty string';
const SHAPES = 'must be a string, an array of strings, an array of token ids (whole numbers from 0) or an array of arrays of token ids';

/** Why `input` is not an embeddings input, or undefined when it is one. */
export function embeddingsInputProblem(input: unknown): InputProblem | undefined {
  // An empty string has nothing to embed; OpenAI refuses it, and an upstream would bill it.
  if (typeof input === 'string') return input === '' ? { param: 'input', reason: EMPTY_STRING } : undefined;
  if (!Array.isArray(input)) return { param: 'input', reason: SHAPES };
  if (input.length === 0) return { param: 'input', reason: 'must not be an empty array' };
  const first: unknown = input[0];
  if (typeof first === 'string') return stringsProblem(input);
  if (isTokenId(first)) return tokenIdsProblem(input, 'input');
  if (Array.isArray(first)) return tokenIdArraysProblem(input);
  return { param: 'input[0]', reason: 'must be a string, a token id (a whole number from 0) or an array of token ids' };
}

/** A vocabulary index: a whole number from 0 (a negative one is no token, and upstreams fail or wrap it). */
function isTokenId(value: unknown): boolean {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

function tooMany(count: number): InputProblem {
  return { param: 'input', reason: `holds ${count} inputs; at most ${MAX_EMBEDDING_INPUTS} per request` };
}

const TOO_MANY_TOKEN_IDS: InputProblem = { param: 'input', reason: `holds more token ids than the ${MAX_EMBEDDING_TOKEN_IDS} a request may hold in all` };

function stringsProblem(input: unknown[]): InputProblem | undefined {
  if (input.length > MAX_EMBEDDING_INPUTS) return tooMany(input.length);
  for (let i = 0; i < input.length; i++) {
    if (typeof input[i] !== 'string') return { param: `input[${i}]`, reason: 'must be a string, as input[0] is' };
    if (input[i] === '') return { param: `input[${i}]`, reason: EMPTY_STRING };
  }
  return undefined;
}

/** One input given as token ids (`param` names it). */
function tokenIdsProblem(ids: unknown[], param: string): InputProblem | undefined {
  if (ids.length > MAX_EMBEDDING_TOKEN_IDS) return TOO_MANY_TOKEN_IDS;
  for (let i = 0; i < ids.length; i++) {
    if (!isTokenId(ids[i])) return { param: `${param}[${i}]`, reason: 'must be a token id (a whole number from 0)' };
  }
  return undefined;
}

function tokenIdArraysProblem(input: unknown[]): InputProblem | undefined {
  if (input.length > MAX_EMBEDDING_INPUTS) return tooMany(input.length);
  let total = 0;
  for (let i = 0; i < input.length; i++) {
    const ids: unknown = input[i];
    if (!Array.isArray(ids)) return { param: `input[${i}]`, reason: 'must be an array of token ids, as input[0] is' };
    if (ids.length === 0) return { param: `input[${i}]`, reason: 'must not be an empty array' };
    // Counted before the walk, so no more than the bound is ever walked.
    total += ids.length;
    if (total > MAX_EMBEDDING_TOKEN_IDS) return TOO_MANY_TOKEN_IDS;
    const problem = tokenIdsProblem(ids, `input[${i}]`);
    if (problem !== undefined) return problem;
  }
  return undefined;
}
