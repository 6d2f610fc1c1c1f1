// dynalite ships no types; the one call bench:peers makes.
declare module 'dynalite' {
  import type { Server } from 'node:http';
  export default function dynalite(options?: { path?: string; createTableMs?: number; deleteTableMs?: number; updateTableMs?: number }): Server;
}
