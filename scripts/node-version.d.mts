// Types of node-version.mjs (kept in plain JavaScript so that an old Node can parse it).
export declare const MINIMUM_NODE_MAJOR: number;
export declare function nodeVersionProblem(version: string): string | undefined;
