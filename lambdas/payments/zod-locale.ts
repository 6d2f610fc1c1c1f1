// zod/mini, unlike the classic `zod` build, sets no locale of its own: without one every issue reads
// "Invalid input". The English messages the classic build loads are set here, once, by every module
// validating with zod/mini (imported for its effect), so that a message reads as it always has
// ("Invalid input: expected string, received number"). zod's configuration is global: a process
// that also loads the classic build gets the same English messages from both.
import { config } from 'zod/mini';
import { en } from 'zod/locales';

config(en());
