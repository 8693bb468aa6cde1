/** What the admin API shows of a model route; the zod schema is the response schema. */
import { z } from 'zod';
import { etagOf } from '../http/if-match.js';
import type { RouteFallback, RouteTarget } from './model-route-validation.js';

export const modelRouteViewSchema = z.object({
  id: z.string(),
  alias: z.string(),
  targets: z.array(z.object({ upstream: z.string(), model: z.string(), weight: z.number() })),
  fallbacks: z.array(z.object({ upstream: z.string(), model: z.string() })),
  timeoutMs: z.number(),
  retries: z.number(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

export type ModelRouteView = z.infer<typeof modelRouteViewSchema>;

export interface ModelRouteRow {
  id: string;
  alias: string;
  targets: RouteTarget[];
  fallbacks: RouteFallback[];
  timeoutMs: number;
  retries: number;
  createdAt: Date;
  updatedAt: Date;
}

export function toModelRouteView(row: ModelRouteRow): ModelRouteView {
  return {
    id: row.id,
    alias: row.alias,
    targets: row.targets,
    fallbacks: row.fallbacks,
    timeoutMs: row.timeoutMs,
    retries: row.retries,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** The route's ETag (http/if-match.ts): a hash of its view, which is all it stores. */
export function modelRouteEtag(row: ModelRouteRow): string {
  return etagOf({ route: toModelRouteView(row) });
}
