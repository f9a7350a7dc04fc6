// madge ships no types; this is the part of its API the layout test uses.
declare module "madge" {
  interface MadgeResult {
    circular(): string[][];
  }
  interface MadgeConfig {
    fileExtensions?: string[];
    tsConfig?: string;
    detectiveOptions?: Record<string, unknown>;
  }
  export default function madge(path: string, config?: MadgeConfig): Promise<MadgeResult>;
}
