// vitk: one executable, one subcommand per job (`vitk --help` lists them, README.md too). The
// subcommands live in libvitk, as the Python module's vitk.main() runs them too.
#include <vitk/vitk.h>

int main(int argc, char** argv) {
  return vitk::command_line_main(argc, argv);
}
