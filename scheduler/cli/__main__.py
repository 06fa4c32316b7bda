from apollo11.scheduler.cli import main

main()
