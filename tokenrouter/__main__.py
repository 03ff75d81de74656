from tokenrouter.cli import main

main()
