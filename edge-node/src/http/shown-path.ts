// A request's path as the node quotes it in an error message: never the query string (callers
// put API keys there, `?api-key=…`) and never more than 200 characters of the path.

const MAX_SHOWN_PATH = 200;

export function shownPath(url: string): string {
  const path = url.split('?', 1)[0] ?? '';
  return path.length > MAX_SHOWN_PATH ? `${path.slice(0, MAX_SHOWN_PATH)}…` : path;
}
